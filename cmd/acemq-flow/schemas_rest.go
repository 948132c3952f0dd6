package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/stores"
)

// schemaRegistry is what the schemas commands read and write: a store
// (every stores.Set is one) or a Confluent-compatible registry over HTTP.
type schemaRegistry interface {
	Subjects(ctx context.Context, deleted bool) ([]string, error)
	SubjectVersions(ctx context.Context, subject string, deleted bool) ([]stores.SchemaVersion, error)
	SchemaVersion(ctx context.Context, subject string, version int) (stores.SchemaVersion, bool, error)
	Compatibility(ctx context.Context, subject string) (stores.Compatibility, error)
	RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error)
	Close() error
}

// restRegistry is a schemaRegistry over the Confluent Schema Registry REST
// API (FLOW-FORMAT §6's subset): acemq-flow's admin listener, Confluent's
// registry, or any other that speaks it. Credentials come from the URL's
// user info (basic auth) or a bearer token.
type restRegistry struct {
	base   *url.URL
	user   *url.Userinfo
	token  string
	client *http.Client
}

func newRESTRegistry(raw, token string) (*restRegistry, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--registry %q is not an http:// or https:// URL of a schema registry", stores.Redact(raw))
	}
	r := &restRegistry{base: u, user: u.User, token: token, client: &http.Client{Timeout: 30 * time.Second}}
	u.User = nil
	u.Path = strings.TrimSuffix(u.Path, "/")
	return r, nil
}

func (r *restRegistry) Close() error { return nil }

// restError is a registry's error answer.
type restError struct {
	Status  int    `json:"-"`
	Code    int    `json:"error_code"`
	Message string `json:"message"`
}

func (e *restError) Error() string {
	return fmt.Sprintf("the registry answered %d (error_code %d): %s", e.Status, e.Code, e.Message)
}

func (r *restRegistry) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base.String()+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	switch {
	case r.token != "":
		req.Header.Set("Authorization", "Bearer "+r.token)
	case r.user != nil:
		pass, _ := r.user.Password()
		req.SetBasicAuth(r.user.Username(), pass)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		e := &restError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(data))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON a schema registry gives: %w", method, path, err)
	}
	return nil
}

func notFound(err error, codes ...int) bool {
	e, ok := err.(*restError)
	if !ok || e.Status != http.StatusNotFound {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return len(codes) == 0
}

func seg(s string) string { return url.PathEscape(s) }

func (r *restRegistry) Subjects(ctx context.Context, deleted bool) ([]string, error) {
	var out []string
	path := "/subjects"
	if deleted {
		path += "?deleted=true"
	}
	return out, r.call(ctx, "GET", path, nil, &out)
}

type restVersion struct {
	Subject    string `json:"subject"`
	ID         int    `json:"id"`
	Version    int    `json:"version"`
	SchemaType string `json:"schemaType"`
	Schema     string `json:"schema"`
}

func (v restVersion) stored() stores.SchemaVersion {
	return stores.SchemaVersion{Subject: v.Subject, Version: v.Version,
		Schema: stores.Schema{ID: v.ID, Type: stores.SchemaType(v.SchemaType).OrAvro(), Text: v.Schema}}
}

func (r *restRegistry) SubjectVersions(ctx context.Context, subject string, deleted bool) ([]stores.SchemaVersion, error) {
	var nums []int
	path := "/subjects/" + seg(subject) + "/versions"
	if deleted {
		path += "?deleted=true"
	}
	if err := r.call(ctx, "GET", path, nil, &nums); err != nil {
		if notFound(err, 40401) {
			return nil, nil
		}
		return nil, err
	}
	var out []stores.SchemaVersion
	for _, n := range nums {
		v, ok, err := r.SchemaVersion(ctx, subject, n)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, nil
}

func (r *restRegistry) SchemaVersion(ctx context.Context, subject string, version int) (stores.SchemaVersion, bool, error) {
	v := "latest"
	if version != stores.LatestVersion {
		v = strconv.Itoa(version)
	}
	var out restVersion
	if err := r.call(ctx, "GET", "/subjects/"+seg(subject)+"/versions/"+v, nil, &out); err != nil {
		if notFound(err, 40401, 40402) {
			return stores.SchemaVersion{}, false, nil
		}
		return stores.SchemaVersion{}, false, err
	}
	return out.stored(), true, nil
}

func (r *restRegistry) Compatibility(ctx context.Context, subject string) (stores.Compatibility, error) {
	var out struct {
		Level string `json:"compatibilityLevel"`
	}
	err := r.call(ctx, "GET", "/config/"+seg(subject), nil, &out)
	if notFound(err) {
		// Confluent answers 404 (40408) for a subject with no level of its
		// own: the registry's applies.
		err = r.call(ctx, "GET", "/config", nil, &out)
	}
	if err != nil {
		return "", err
	}
	if out.Level == "" {
		return stores.DefaultCompatibility, nil
	}
	return stores.Compatibility(out.Level), nil
}

func (r *restRegistry) RegisterSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	req := map[string]string{"schema": text}
	if typ.OrAvro() != stores.SchemaAvro {
		req["schemaType"] = string(typ)
	}
	before, _, err := r.lookup(ctx, subject, req)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if before != nil {
		return *before, false, nil
	}
	var id struct {
		ID int `json:"id"`
	}
	if err := r.call(ctx, "POST", "/subjects/"+seg(subject)+"/versions", req, &id); err != nil {
		return stores.SchemaVersion{}, false, err
	}
	after, _, err := r.lookup(ctx, subject, req)
	if err != nil {
		return stores.SchemaVersion{}, false, err
	}
	if after == nil {
		return stores.SchemaVersion{Subject: subject, Schema: stores.Schema{ID: id.ID, Type: typ.OrAvro()}}, true, nil
	}
	return *after, true, nil
}

// lookup is POST /subjects/{s}: the version holding the schema, nil when
// there is none.
func (r *restRegistry) lookup(ctx context.Context, subject string, req map[string]string) (*stores.SchemaVersion, bool, error) {
	var out restVersion
	if err := r.call(ctx, "POST", "/subjects/"+seg(subject), req, &out); err != nil {
		if notFound(err, 40401, 40403) {
			return nil, false, nil
		}
		return nil, false, err
	}
	v := out.stored()
	return &v, true, nil
}
