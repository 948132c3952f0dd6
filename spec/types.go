package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// validator is a compiled payload schema.
type validator = *jsonschema.Schema

// Validate checks a decoded JSON payload (the values encoding/json produces
// into an `any`) against the type's schema. A nil Type accepts anything.
// The error names the first failing location and keyword in words.
func (t *Type) Validate(payload any) error {
	if t.IsAvro() {
		return t.validateAvro(payload)
	}
	if t == nil || t.schema == nil {
		return nil
	}
	if err := t.schema.Validate(payload); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			leaf := deepestCause(ve)
			loc := leaf.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			return fmt.Errorf("payload does not match type %s at %s: %s", t.Name, loc, leaf.Message)
		}
		return fmt.Errorf("payload does not match type %s: %w", t.Name, err)
	}
	return nil
}

// ValidateJSON decodes body as JSON and validates it. Invalid JSON is an
// error too. An Avro type first checks body in one pass with no tree
// (avroCheck); only JSON that check does not surely take is decoded and
// validated, which gives the error.
func (t *Type) ValidateJSON(body []byte) error {
	if !t.compiled() {
		return nil
	}
	if t.IsAvro() && t.Avro.check.fits(body) {
		return nil
	}
	v, err := DecodeJSON(body)
	if err != nil {
		return fmt.Errorf("payload is not JSON: %w", err)
	}
	return t.Validate(v)
}

// DecodeJSON decodes a JSON document into the values a payload type and a
// `when` condition are evaluated on (numbers as json.Number are avoided:
// they decode as float64, as in every JSON Schema validator).
func DecodeJSON(body []byte) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return normalizeNumbers(v), nil
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	}
	return v
}

func deepestCause(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// typeCompiler compiles the payload types of one flow file. $ref files are
// read from the file system the flow came from and must stay inside the
// flow file's folder.
type typeCompiler struct {
	fsys fs.FS
	dir  string // the flow file's folder, as an fs.FS path
	base string // the flow file's name without folder
	c    *jsonschema.Compiler
}

const fileScheme = "file:///"

// fileURL is the URL of a path in the flow's file system, escaped, so that
// a name holding '#', '?' or '%' (a type named `0#`, say) stays part of the
// path instead of becoming a fragment or a query.
func fileURL(p string) string {
	return (&url.URL{Scheme: "file", Path: "/" + p}).String()
}

func newTypeCompiler(fsys fs.FS, file string) *typeCompiler {
	tc := &typeCompiler{fsys: fsys, dir: path.Dir(file), base: path.Base(file)}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	c.AssertContent = true
	c.LoadURL = tc.load
	tc.c = c
	return tc
}

// refOutside is the error the loader returns for a $ref that leaves the
// flow's folder.
type refOutside struct{ ref string }

func (e refOutside) Error() string {
	return fmt.Sprintf("$ref %q points outside the flow file's folder", e.ref)
}

// unknownFormat is the error for a format the validator does not know.
type unknownFormat struct{ format string }

func (e unknownFormat) Error() string {
	return fmt.Sprintf("format %q is not one the validator knows, so it would assert nothing", e.format)
}

// checkRefs refuses a document whose $refs name a file by an absolute path
// or through "..": resolved as URLs, they stop at the root of the file
// system the flows were loaded from, which is the flow file's own folder
// when it was named alone, so "../b.json" silently read "b.json" beside
// the flow instead of refusing it. doc is the document as the values
// encoding/json decodes into an `any`.
//
// It also refuses a format the validator does not know: FLOW-FORMAT §1
// asserts formats, and an unknown one (a typo such as "date_time") would
// silently assert nothing.
func checkRefs(doc any) error {
	var walk func(any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if r, ok := x.(string); ok && k == "$ref" {
					file, _, _ := strings.Cut(r, "#")
					if strings.HasPrefix(file, "/") || slices.Contains(strings.Split(file, "/"), "..") {
						return refOutside{ref: r}
					}
				}
				if f, ok := x.(string); ok && k == "format" {
					if _, known := jsonschema.Formats[f]; !known {
						return unknownFormat{format: f}
					}
				}
				if k == "enum" || k == "const" || k == "default" || k == "examples" {
					continue // data, not schema
				}
				if err := walk(x); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range v {
				if err := walk(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(doc)
}

// checkRefsJSON is checkRefs for a document read as bytes.
func checkRefsJSON(data []byte) error {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return nil // the compiler reports what does not parse
	}
	return checkRefs(v)
}

func (tc *typeCompiler) load(u string) (io.ReadCloser, error) {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "file" || pu.Host != "" {
		return nil, fmt.Errorf("$ref %q is not a file in the flow's folder; only relative file references are allowed", u)
	}
	p := path.Clean(strings.TrimPrefix(pu.Path, "/"))
	if tc.dir != "." && !strings.HasPrefix(p, tc.dir+"/") || strings.HasPrefix(p, "../") || p == ".." {
		return nil, refOutside{ref: p}
	}
	data, err := fs.ReadFile(tc.fsys, p)
	if err != nil {
		return nil, fmt.Errorf("$ref file %s cannot be read: %w", p, unwrapPathError(err))
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("$ref file %s is over the %d byte limit", p, MaxFileSize)
	}
	if err := checkRefsJSON(data); err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// compile compiles the schema document raw (the value under types.<name>,
// as JSON); doc is the same document as the builder decoded it.
func (tc *typeCompiler) compile(name string, raw []byte, doc any) (*jsonschema.Schema, error) {
	// The inline document lives beside the flow file, so relative $refs in
	// it resolve against the flow file's folder.
	u := fileURL(path.Join(tc.dir, tc.base+".types."+name+".json"))
	if err := checkRefs(doc); err != nil {
		return nil, err
	}
	if err := tc.c.AddResource(u, bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return tc.c.Compile(u)
}

// envType builds the Go type a `when` expression sees for a payload of the
// given schema: objects with declared properties become structs whose
// fields are those properties (so a misspelt field fails to compile),
// scalars their Go types, anything unconstrained `any`.
func envType(s *jsonschema.Schema, depth int) reflect.Type {
	anyType := reflect.TypeFor[any]()
	if s == nil || depth > 16 {
		return anyType
	}
	for s.Ref != nil && len(s.Types) == 0 && len(s.Properties) == 0 {
		s = s.Ref
		depth++
		if depth > 16 {
			return anyType
		}
	}
	if len(s.Types) != 1 {
		return anyType
	}
	switch s.Types[0] {
	case "string":
		return reflect.TypeFor[string]()
	case "integer":
		return reflect.TypeFor[int]()
	case "number":
		return reflect.TypeFor[float64]()
	case "boolean":
		return reflect.TypeFor[bool]()
	case "array":
		if s.Items2020 != nil {
			return reflect.SliceOf(envType(s.Items2020, depth+1))
		}
		return reflect.TypeFor[[]any]()
	case "object":
		if len(s.Properties) == 0 {
			return reflect.TypeFor[map[string]any]()
		}
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
		fields := make([]reflect.StructField, 0, len(names))
		for i, n := range names {
			fields = append(fields, reflect.StructField{
				Name: fmt.Sprintf("F%d", i),
				Type: envType(s.Properties[n], depth+1),
				Tag:  reflect.StructTag(fmt.Sprintf(`expr:%q json:%q`, n, n)),
			})
		}
		return reflect.StructOf(fields)
	}
	return anyType
}
