package admin

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/schemacompat"
)

// Registry is the schema registry the admin listener serves through the
// Confluent Schema Registry REST API (FLOW-FORMAT §6). Every stores.Set is
// one.
type Registry = stores.Schemas

// RegistryContentType is the content type of the registry's answers, as
// Confluent's clients expect it.
const RegistryContentType = "application/vnd.schemaregistry.v1+json"

// The Confluent error codes the registry answers with (error_code in the
// body; the HTTP status is the first three digits).
const (
	codeSubjectNotFound  = 40401
	codeVersionNotFound  = 40402
	codeSchemaNotFound   = 40403
	codeIncompatible     = 409
	codeInvalidSchema    = 42201
	codeInvalidVersion   = 42202
	codeInvalidLevel     = 42203
	codeNotPermitted     = 42205
	codeInvalidSubject   = 42208
	codeStore            = 50001
	codeBadRequest       = 400
	codeUnauthorized     = 401
	maxSchemaRequestBody = 8 << 20
)

// registryError is an answer of the registry API: its HTTP status and
// Confluent's error_code and message.
type registryError struct {
	status int
	code   int
	msg    string
}

func (e *registryError) Error() string { return e.msg }

func regErr(code int, format string, args ...any) *registryError {
	status := code
	for status >= 1000 {
		status /= 10
	}
	return &registryError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// schemaRequest is the body of a register, look-up or compatibility call.
// References are not supported: a schema that has them is refused.
type schemaRequest struct {
	Schema     string            `json:"schema"`
	SchemaType stores.SchemaType `json:"schemaType,omitempty"`
	References []json.RawMessage `json:"references,omitempty"`
}

// versionBody is a version as Confluent's API returns it; schemaType is
// left out for Avro, as Confluent does.
type versionBody struct {
	Subject    string `json:"subject"`
	ID         int    `json:"id"`
	Version    int    `json:"version"`
	SchemaType string `json:"schemaType,omitempty"`
	Schema     string `json:"schema"`
}

func versionOf(v stores.SchemaVersion) versionBody {
	return versionBody{Subject: v.Subject, ID: v.ID, Version: v.Version, SchemaType: typeField(v.Type), Schema: v.Text}
}

func typeField(t stores.SchemaType) string {
	if t.OrAvro() == stores.SchemaAvro {
		return ""
	}
	return string(t)
}

// registryRoutes adds the Confluent-compatible registry API to mux. With a
// token every call needs it, as every other call but health and readiness
// does: as a bearer token, or as the password of HTTP basic auth (what
// Confluent's clients send with basic.auth.user.info, any user name).
func (s *Server) registryRoutes(mux *http.ServeMux) {
	reg := s.opts.Registry
	handle := func(pattern string, fn func(req *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) {
			if !s.registryAuthorized(req) {
				w.Header().Set("WWW-Authenticate", `Basic realm="acemq-flow schema registry"`)
				writeRegistry(w, regErr(codeUnauthorized, "this call needs the admin token: as a bearer token, or as the password of basic auth"))
				return
			}
			out, err := fn(req)
			if err != nil {
				writeRegistry(w, err)
				return
			}
			writeRegistry(w, out)
		})
	}
	handle("GET /schemas/types", func(*http.Request) (any, error) {
		return []string{string(stores.SchemaAvro), string(stores.SchemaJSON)}, nil
	})
	handle("GET /schemas/ids/{id}", func(req *http.Request) (any, error) {
		sc, err := s.schemaByID(req)
		if err != nil {
			return nil, err
		}
		return struct {
			SchemaType string `json:"schemaType,omitempty"`
			Schema     string `json:"schema"`
		}{typeField(sc.Type), sc.Text}, nil
	})
	handle("GET /schemas/ids/{id}/schema", func(req *http.Request) (any, error) {
		sc, err := s.schemaByID(req)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(sc.Text), nil
	})
	handle("GET /subjects", func(req *http.Request) (any, error) {
		subjects, err := reg.Subjects(req.Context(), req.URL.Query().Get("deleted") == "true")
		if err != nil {
			return nil, storeErr(err)
		}
		if subjects == nil {
			subjects = []string{}
		}
		return subjects, nil
	})
	handle("GET /subjects/{subject}/versions", func(req *http.Request) (any, error) {
		subject := req.PathValue("subject")
		vs, err := reg.SubjectVersions(req.Context(), subject, req.URL.Query().Get("deleted") == "true")
		if err != nil {
			return nil, storeErr(err)
		}
		if len(vs) == 0 {
			return nil, subjectNotFound(subject)
		}
		nums := make([]int, len(vs))
		for i, v := range vs {
			nums[i] = v.Version
		}
		return nums, nil
	})
	handle("GET /subjects/{subject}/versions/{version}", func(req *http.Request) (any, error) {
		v, err := s.subjectVersion(req)
		if err != nil {
			return nil, err
		}
		return versionOf(v), nil
	})
	handle("GET /subjects/{subject}/versions/{version}/schema", func(req *http.Request) (any, error) {
		v, err := s.subjectVersion(req)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(v.Text), nil
	})
	handle("POST /subjects/{subject}/versions", func(req *http.Request) (any, error) {
		subject := req.PathValue("subject")
		body, err := readSchema(req, subject)
		if err != nil {
			return nil, err
		}
		v, _, err := reg.RegisterSchema(req.Context(), subject, body.SchemaType, body.Schema)
		if err != nil {
			return nil, schemaErr(err)
		}
		return struct {
			ID int `json:"id"`
		}{v.ID}, nil
	})
	handle("POST /subjects/{subject}", func(req *http.Request) (any, error) {
		subject := req.PathValue("subject")
		body, err := readSchema(req, subject)
		if err != nil {
			return nil, err
		}
		v, ok, err := reg.LookupSchema(req.Context(), subject, body.SchemaType, body.Schema)
		if err != nil {
			return nil, schemaErr(err)
		}
		if !ok {
			vs, err := reg.SubjectVersions(req.Context(), subject, false)
			if err != nil {
				return nil, storeErr(err)
			}
			if len(vs) == 0 {
				return nil, subjectNotFound(subject)
			}
			return nil, regErr(codeSchemaNotFound, "Schema not found: subject '%s' has no version with this schema; register it with POST /subjects/%s/versions", subject, subject)
		}
		return versionOf(v), nil
	})
	handle("DELETE /subjects/{subject}", func(req *http.Request) (any, error) {
		subject := req.PathValue("subject")
		if req.URL.Query().Get("permanent") == "true" {
			return nil, regErr(codeNotPermitted, "subject '%s': this registry never deletes permanently, so that every id ever written still resolves; a soft delete (without permanent=true) hides the subject", subject)
		}
		nums, err := reg.DeleteSubject(req.Context(), subject)
		if err != nil {
			return nil, storeErr(err)
		}
		if len(nums) == 0 {
			return nil, subjectNotFound(subject)
		}
		return nums, nil
	})
	compat := func(req *http.Request, one bool) (any, error) {
		subject := req.PathValue("subject")
		body, err := readSchema(req, subject)
		if err != nil {
			return nil, err
		}
		p, err := schemacompat.Parse(body.SchemaType, body.Schema)
		if err != nil {
			return nil, schemaErr(err)
		}
		level, err := reg.Compatibility(req.Context(), subject)
		if err != nil {
			return nil, storeErr(err)
		}
		var against []stores.SchemaVersion
		if one {
			v, err := s.subjectVersion(req)
			if err != nil {
				return nil, err
			}
			against = []stores.SchemaVersion{v}
		} else if against, err = reg.SubjectVersions(req.Context(), subject, false); err != nil {
			return nil, storeErr(err)
		}
		out := struct {
			IsCompatible bool     `json:"is_compatible"`
			Messages     []string `json:"messages,omitempty"`
		}{IsCompatible: true}
		if err := schemacompat.Check(level, p, against); err != nil {
			var ie *stores.IncompatibleSchemaError
			if !errors.As(err, &ie) {
				return nil, storeErr(err)
			}
			ie.Subject = subject
			out.IsCompatible = false
			if req.URL.Query().Get("verbose") == "true" {
				out.Messages = []string{ie.Error()}
			}
		}
		return out, nil
	}
	handle("POST /compatibility/subjects/{subject}/versions", func(req *http.Request) (any, error) { return compat(req, false) })
	handle("POST /compatibility/subjects/{subject}/versions/{version}", func(req *http.Request) (any, error) { return compat(req, true) })
	getLevel := func(req *http.Request) (any, error) {
		level, err := reg.Compatibility(req.Context(), req.PathValue("subject"))
		if err != nil {
			return nil, storeErr(err)
		}
		// Confluent answers compatibilityLevel; some clients read
		// compatibility, the field the PUT takes.
		return map[string]string{"compatibilityLevel": string(level), "compatibility": string(level)}, nil
	}
	putLevel := func(req *http.Request) (any, error) {
		subject := req.PathValue("subject")
		var body struct {
			Compatibility stores.Compatibility `json:"compatibility"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(nil, req.Body, 4<<10)).Decode(&body); err != nil {
			return nil, regErr(codeBadRequest, "the body is not {\"compatibility\": \"LEVEL\"}: %v", err)
		}
		body.Compatibility = stores.Compatibility(strings.ToUpper(string(body.Compatibility)))
		if !body.Compatibility.Valid() {
			return nil, regErr(codeInvalidLevel, "Invalid compatibility level %q: use one of NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE", body.Compatibility)
		}
		if subject != "" {
			if err := stores.CheckSubject(subject); err != nil {
				return nil, regErr(codeInvalidSubject, "%v", err)
			}
		}
		if err := reg.SetCompatibility(req.Context(), subject, body.Compatibility); err != nil {
			return nil, storeErr(err)
		}
		return map[string]string{"compatibility": string(body.Compatibility)}, nil
	}
	handle("GET /config", getLevel)
	handle("GET /config/{subject}", getLevel)
	handle("PUT /config", putLevel)
	handle("PUT /config/{subject}", putLevel)
}

func (s *Server) registryAuthorized(req *http.Request) bool {
	if s.opts.Token == "" || s.authorized(req) {
		return true
	}
	_, pass, ok := req.BasicAuth()
	return ok && subtle.ConstantTimeCompare([]byte(pass), []byte(s.opts.Token)) == 1
}

func (s *Server) schemaByID(req *http.Request) (stores.Schema, error) {
	raw := req.PathValue("id")
	id, err := strconv.Atoi(raw)
	if err != nil || id < 1 || id > math.MaxInt32 {
		return stores.Schema{}, regErr(codeSchemaNotFound, "Schema %s not found: an id is a whole number from 1 to %d", raw, math.MaxInt32)
	}
	sc, ok, err := s.opts.Registry.SchemaByID(req.Context(), id)
	if err != nil {
		return stores.Schema{}, storeErr(err)
	}
	if !ok {
		return stores.Schema{}, regErr(codeSchemaNotFound, "Schema %d not found", id)
	}
	return sc, nil
}

// subjectVersion reads the {subject} and {version} of req: 40402 when the
// subject exists without that version, 40401 when it does not exist.
func (s *Server) subjectVersion(req *http.Request) (stores.SchemaVersion, error) {
	subject, raw := req.PathValue("subject"), req.PathValue("version")
	version := stores.LatestVersion
	if raw != "latest" {
		n, err := strconv.Atoi(raw)
		if err != nil || n == 0 || n < -1 {
			return stores.SchemaVersion{}, regErr(codeInvalidVersion, "The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", raw)
		}
		version = n
	}
	v, ok, err := s.opts.Registry.SchemaVersion(req.Context(), subject, version)
	if err != nil {
		return stores.SchemaVersion{}, storeErr(err)
	}
	if ok {
		return v, nil
	}
	vs, err := s.opts.Registry.SubjectVersions(req.Context(), subject, false)
	if err != nil {
		return stores.SchemaVersion{}, storeErr(err)
	}
	if len(vs) == 0 {
		return stores.SchemaVersion{}, subjectNotFound(subject)
	}
	return stores.SchemaVersion{}, regErr(codeVersionNotFound, "Version %s not found in subject '%s' (its latest is %d)", raw, subject, vs[len(vs)-1].Version)
}

func readSchema(req *http.Request, subject string) (schemaRequest, error) {
	var body schemaRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, req.Body, maxSchemaRequestBody)).Decode(&body); err != nil {
		return body, regErr(codeBadRequest, "the body is not {\"schema\": \"...\", \"schemaType\": \"AVRO|JSON\"}: %v", err)
	}
	if err := stores.CheckSubject(subject); err != nil {
		return body, regErr(codeInvalidSubject, "%v", err)
	}
	if len(body.References) > 0 {
		return body, regErr(codeInvalidSchema, "subject '%s': schema references are not supported: inline the referenced types", subject)
	}
	if body.Schema == "" {
		return body, regErr(codeInvalidSchema, "subject '%s': the body has no schema", subject)
	}
	return body, nil
}

func subjectNotFound(subject string) error {
	return regErr(codeSubjectNotFound, "Subject '%s' not found.", subject)
}

// schemaErr maps the store's answers about a schema to Confluent's codes.
func schemaErr(err error) error {
	switch {
	case errors.Is(err, stores.ErrIncompatibleSchema):
		return regErr(codeIncompatible, "%v", err)
	case errors.Is(err, stores.ErrInvalidSchema):
		return regErr(codeInvalidSchema, "%v", err)
	}
	return storeErr(err)
}

func storeErr(err error) error {
	var re *registryError
	if errors.As(err, &re) {
		return re
	}
	return regErr(codeStore, "Error in the backend data store: %v", err)
}

func writeRegistry(w http.ResponseWriter, v any) {
	status := http.StatusOK
	var re *registryError
	if err, ok := v.(error); ok {
		if !errors.As(err, &re) {
			re = regErr(codeStore, "%v", err)
		}
		status = re.status
		v = struct {
			ErrorCode int    `json:"error_code"`
			Message   string `json:"message"`
		}{re.code, re.msg}
	}
	w.Header().Set("Content-Type", RegistryContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
