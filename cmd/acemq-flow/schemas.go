package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/schemacompat"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

func newSchemasCmd(s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schemas",
		Short: "The schema registry: list, show, register, check compatibility in CI",
		Long: `Read and write the schema registry (FLOW-FORMAT §6): in the store
(--store, the one the runtime uses), or in a Confluent-compatible registry
over HTTP (--registry: the admin listener of a runtime, or Confluent's).

  schemas list                       the subjects, their latest version, id and level
  schemas show SUBJECT [VERSION]     one version (default: the latest) and its schema
  schemas register SUBJECT FILE      register FILE (.avsc: Avro, .json: JSON Schema)
  schemas check PATH...              check schema files and flows' Avro types against their subjects; exit 1 when one is incompatible`,
	}
	cmd.AddCommand(newSchemasListCmd(s), newSchemasShowCmd(s), newSchemasRegisterCmd(s), newSchemasCheckCmd(s))
	return cmd
}

// schemaFlags are the flags every schemas subcommand takes.
type schemaFlags struct {
	store, registry, token, format string
}

func (sf *schemaFlags) add(f *pflag.FlagSet) {
	f.StringVar(&sf.store, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store holding the registry: postgres://… or sqlite:PATH (env ACEMQ_STORE_URL)")
	f.StringVar(&sf.registry, "registry", os.Getenv("ACEMQ_SCHEMA_REGISTRY_URL"), "a Confluent-compatible registry instead of the store: http(s)://[user:password@]host[:port][/path] (env ACEMQ_SCHEMA_REGISTRY_URL)")
	f.StringVar(&sf.token, "admin-token", os.Getenv("ACEMQ_ADMIN_TOKEN"), "bearer token for --registry, the admin token of a runtime's listener (env ACEMQ_ADMIN_TOKEN)")
	f.StringVar(&sf.format, "format", "text", "output format: text or json")
	// --help prints the default, which the environment may give a password.
	f.Lookup("registry").DefValue = stores.Redact(sf.registry)
}

// where names the registry for messages, without a password.
func (sf *schemaFlags) where() string {
	if sf.registry != "" {
		return stores.Redact(sf.registry)
	}
	return redactStore(sf.store)
}

// open checks the flags and opens the registry: --registry when given, the
// store otherwise (the memory store refused: it would be empty).
func (sf *schemaFlags) open(ctx context.Context) (schemaRegistry, error) {
	if sf.format != "text" && sf.format != "json" {
		return nil, usage("--format must be text or json, not %q", sf.format)
	}
	if sf.registry != "" {
		r, err := newRESTRegistry(sf.registry, sf.token)
		if err != nil {
			return nil, usage("%v", err)
		}
		return r, nil
	}
	backend, err := storeurl.Backend(sf.store)
	if err != nil {
		return nil, usage("--store: %v", err)
	}
	if backend == "memory" {
		return nil, usage("--store memory: holds the schemas of the process that opened it only; name the store the runtime uses (sqlite:PATH or postgres://…), or --registry URL")
	}
	set, err := openStore(ctx, sf.store, 0, false)
	if err != nil {
		return nil, failed("%v", err)
	}
	return set, nil
}

// subjectRow is one subject as `schemas list` shows it.
type subjectRow struct {
	Subject       string               `json:"subject"`
	Versions      int                  `json:"versions"`
	Latest        int                  `json:"latest"`
	ID            int                  `json:"id"`
	SchemaType    stores.SchemaType    `json:"schemaType"`
	Compatibility stores.Compatibility `json:"compatibility"`
}

func newSchemasListCmd(s streams) *cobra.Command {
	var (
		sf      schemaFlags
		deleted bool
	)
	cmd := &cobra.Command{
		Use:   "list [--deleted] [--store URL | --registry URL] [--format text|json]",
		Short: "List the subjects: versions, the latest's id and type, the compatibility level",
		Long: `List the registry's subjects, sorted, one line each: how many live versions it
has, the latest version and its schema id and type, and its compatibility
level. --deleted lists the soft-deleted subjects too (their ids still resolve).

Environment: ACEMQ_STORE_URL (--store), ACEMQ_SCHEMA_REGISTRY_URL (--registry), ACEMQ_ADMIN_TOKEN (--admin-token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer reg.Close()
			ctx := cmd.Context()
			subjects, err := reg.Subjects(ctx, deleted)
			if err != nil {
				return failed("list the subjects in %s: %v", sf.where(), err)
			}
			rows := []subjectRow{}
			for _, subject := range subjects {
				vs, err := reg.SubjectVersions(ctx, subject, deleted)
				if err != nil {
					return failed("read the versions of %q in %s: %v", subject, sf.where(), err)
				}
				level, err := reg.Compatibility(ctx, subject)
				if err != nil {
					return failed("read the level of %q in %s: %v", subject, sf.where(), err)
				}
				row := subjectRow{Subject: subject, Versions: len(vs), Compatibility: level}
				if len(vs) > 0 {
					last := vs[len(vs)-1]
					row.Latest, row.ID, row.SchemaType = last.Version, last.ID, last.Type.OrAvro()
				}
				rows = append(rows, row)
			}
			if sf.format == "json" {
				return writeJSON(s.out, map[string]any{"subjects": rows})
			}
			if len(rows) == 0 {
				fmt.Fprintln(s.out, "no subjects: register one with acemq-flow schemas register SUBJECT FILE")
				return nil
			}
			tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SUBJECT\tVERSIONS\tLATEST\tID\tTYPE\tCOMPATIBILITY")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", r.Subject, r.Versions, r.Latest, r.ID, r.SchemaType, r.Compatibility)
			}
			return tw.Flush()
		},
	}
	sf.add(cmd.Flags())
	cmd.Flags().BoolVar(&deleted, "deleted", false, "list soft-deleted subjects and versions too")
	return cmd
}

// versionJSON is one version as `schemas show --format json` prints it:
// the schema itself as JSON, not as a string.
type versionJSON struct {
	Subject       string               `json:"subject"`
	Version       int                  `json:"version"`
	ID            int                  `json:"id"`
	SchemaType    stores.SchemaType    `json:"schemaType"`
	Compatibility stores.Compatibility `json:"compatibility"`
	Schema        json.RawMessage      `json:"schema"`
}

func newSchemasShowCmd(s streams) *cobra.Command {
	var sf schemaFlags
	cmd := &cobra.Command{
		Use:   "show SUBJECT [VERSION] [--store URL | --registry URL] [--format text|json]",
		Short: "Show one version of a subject and its schema",
		Long: `Show VERSION of SUBJECT (a number, or latest: the default): its schema id, type,
the subject's compatibility level, and the schema, indented. For Avro the
schema is the one registered with its defaults, docs and aliases (what a
reader resolving to it needs); its id is taken from its Parsing Canonical
Form.

Environment: ACEMQ_STORE_URL (--store), ACEMQ_SCHEMA_REGISTRY_URL (--registry), ACEMQ_ADMIN_TOKEN (--admin-token).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usage("name the subject: acemq-flow schemas show SUBJECT [VERSION] (acemq-flow schemas list gives the subjects)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			version := stores.LatestVersion
			if len(args) == 2 && args[1] != "latest" {
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 1 {
					return usage("version %q is not a version number (1, 2, …) or latest", args[1])
				}
				version = n
			}
			reg, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer reg.Close()
			ctx, subject := cmd.Context(), args[0]
			v, ok, err := reg.SchemaVersion(ctx, subject, version)
			if err != nil {
				return failed("read %q in %s: %v", subject, sf.where(), err)
			}
			if !ok {
				vs, err := reg.SubjectVersions(ctx, subject, false)
				switch {
				case err != nil:
					return failed("read %q in %s: %v", subject, sf.where(), err)
				case len(vs) == 0:
					return failed("subject %q is not in %s (or was soft-deleted); acemq-flow schemas list gives the subjects", subject, sf.where())
				default:
					return failed("subject %q has no version %s in %s; its versions are 1 to %d", subject, args[1], sf.where(), vs[len(vs)-1].Version)
				}
			}
			level, err := reg.Compatibility(ctx, subject)
			if err != nil {
				return failed("read the level of %q in %s: %v", subject, sf.where(), err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, []byte(v.Text), "", "  "); err != nil {
				pretty.Reset()
				pretty.WriteString(v.Text)
			}
			if sf.format == "json" {
				return writeJSON(s.out, versionJSON{Subject: v.Subject, Version: v.Version, ID: v.ID, SchemaType: v.Type.OrAvro(),
					Compatibility: level, Schema: json.RawMessage(pretty.Bytes())})
			}
			fmt.Fprintf(s.out, "subject:        %s\nversion:        %d\nid:             %d\ntype:           %s\ncompatibility:  %s\n\n%s\n",
				v.Subject, v.Version, v.ID, v.Type.OrAvro(), level, pretty.String())
			return nil
		},
	}
	sf.add(cmd.Flags())
	return cmd
}

// schemaTypeOf is the type of a schema file: .avsc is Avro, .json JSON
// Schema; typ ("avro", "json"), when given, decides.
func schemaTypeOf(path, typ string) (stores.SchemaType, error) {
	switch strings.ToLower(typ) {
	case "avro":
		return stores.SchemaAvro, nil
	case "json":
		return stores.SchemaJSON, nil
	case "":
	default:
		return "", usage("--type %q: give avro or json", typ)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".avsc":
		return stores.SchemaAvro, nil
	case ".json":
		return stores.SchemaJSON, nil
	}
	return "", usage("%s: cannot tell the schema's type from its name; name it .avsc (Avro) or .json (JSON Schema), or give --type avro|json", path)
}

func newSchemasRegisterCmd(s streams) *cobra.Command {
	var (
		sf  schemaFlags
		typ string
	)
	cmd := &cobra.Command{
		Use:   "register SUBJECT FILE [--type avro|json] [--store URL | --registry URL] [--format text|json]",
		Short: "Register FILE as a new version of SUBJECT, checked against the subject's level",
		Long: `Register the schema in FILE under SUBJECT. The same schema (same canonical form)
always gets the same id, in every subject; a schema the subject already has is
not registered twice. A new version is checked against the subject's earlier
ones under its compatibility level (BACKWARD by default) and refused, exit 1,
naming the first incompatible field.

Environment: ACEMQ_STORE_URL (--store), ACEMQ_SCHEMA_REGISTRY_URL (--registry), ACEMQ_ADMIN_TOKEN (--admin-token).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usage("name the subject and the file: acemq-flow schemas register SUBJECT FILE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			subject, path := args[0], args[1]
			st, err := schemaTypeOf(path, typ)
			if err != nil {
				return err
			}
			text, err := os.ReadFile(path)
			if err != nil {
				return failed("%s cannot be read: %v", path, err)
			}
			reg, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer reg.Close()
			v, created, err := reg.RegisterSchema(cmd.Context(), subject, st, string(text))
			if err != nil {
				return failed("%s: register in %s: %v", path, sf.where(), err)
			}
			if sf.format == "json" {
				return writeJSON(s.out, map[string]any{"subject": subject, "version": v.Version, "id": v.ID, "created": created})
			}
			if created {
				fmt.Fprintf(s.out, "%s: registered as %s version %d, schema id %d\n", path, subject, v.Version, v.ID)
			} else {
				fmt.Fprintf(s.out, "%s: %s has it already, as version %d, schema id %d\n", path, subject, v.Version, v.ID)
			}
			return nil
		},
	}
	sf.add(cmd.Flags())
	cmd.Flags().StringVar(&typ, "type", "", "the schema's type, avro or json (default: from the file's name, .avsc or .json)")
	return cmd
}

// checkResult is what `schemas check` found for one file, or for one Avro
// type of a flow (Path is then the type's position, Type its name).
type checkResult struct {
	Path          string               `json:"path"`
	Type          string               `json:"type,omitempty"`
	Subject       string               `json:"subject"`
	SchemaType    stores.SchemaType    `json:"schemaType"`
	Compatibility stores.Compatibility `json:"compatibility,omitempty"`
	// Outcome is compatible, incompatible, registered (the registry has
	// this very schema), new-subject (nothing to check against) or invalid.
	Outcome   string `json:"outcome"`
	Versions  []int  `json:"versions,omitempty"` // checked against
	Version   int    `json:"version,omitempty"`  // incompatible with, or registered as
	Direction string `json:"direction,omitempty"`
	Field     string `json:"field,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func newSchemasCheckCmd(s streams) *cobra.Command {
	var (
		sf      schemaFlags
		subject string
	)
	cmd := &cobra.Command{
		Use:   "check [--subject S] [--store URL | --registry URL] [--format text|json] PATH...",
		Short: "Check schema files and flows' Avro types against their subjects' versions; exit 1 when one is incompatible",
		Long: `Check each schema file (.avsc: Avro, .json: JSON Schema) and each Avro type of
each flow file (.yaml, .yml) against the versions of its subject under the
subject's compatibility level, without registering anything: the CI gate for
a schema change. A folder stands for the schema files and flow files in it;
an .avsc file a flow's type names by $ref is checked as that type, under
the type's subject. A file's subject is its name without the extension
(schemas/shop.OrderPlaced.avsc checks shop.OrderPlaced), or --subject for a
single file; a flow's Avro type's is its subject: (default <flow>.<type>).
A subject the registry does not have yet has nothing to check against. Exit 1
when a schema is incompatible (the first incompatible field is named) or
invalid, or a flow file does not load, 0 otherwise.

The registry is the store (--store), or any Confluent-compatible registry over
HTTP (--registry URL), whose versions and level are read and checked here with
acemq-flow's rules.

Environment: ACEMQ_STORE_URL (--store), ACEMQ_SCHEMA_REGISTRY_URL (--registry), ACEMQ_ADMIN_TOKEN (--admin-token).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usage("name the schema files or folders: acemq-flow schemas check PATH...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			files, flowPaths, err := schemaFiles(args)
			if err != nil {
				return err
			}
			if subject != "" && (len(files) != 1 || len(flowPaths) > 0) {
				return usage("--subject names the subject of one schema file, and %d files and %d flow paths were given (a flow's Avro type names its own, subject:)", len(files), len(flowPaths))
			}
			types, refd, err := flowAvroTypes(s, flowPaths)
			if err != nil {
				return err
			}
			files = slices.DeleteFunc(files, func(f string) bool { return refd[filepath.Clean(f)] })
			reg, err := sf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer reg.Close()
			var results []checkResult
			for _, ft := range types {
				r, err := checkAvroType(cmd.Context(), reg, ft)
				if err != nil {
					return failed("%s: type %s: %s: %v", ft.t.Pos, ft.t.Name, sf.where(), err)
				}
				results = append(results, r)
			}
			for _, f := range files {
				r, err := checkSchemaFile(cmd.Context(), reg, f, subject)
				if err != nil {
					return failed("%s: %s: %v", f, sf.where(), err)
				}
				results = append(results, r)
			}
			bad := slices.ContainsFunc(results, func(r checkResult) bool { return r.Outcome == "incompatible" || r.Outcome == "invalid" })
			if sf.format == "json" {
				if err := writeJSON(s.out, map[string]any{"results": results, "compatible": !bad}); err != nil {
					return err
				}
			} else {
				renderCheck(s.out, results)
			}
			if bad {
				return silent1
			}
			return nil
		},
	}
	sf.add(cmd.Flags())
	cmd.Flags().StringVar(&subject, "subject", "", "the subject of the one file checked (default: the file's name without its extension)")
	return cmd
}

// schemaFiles expands args: a schema file is itself, a flow file (.yaml,
// .yml) a flow path, a folder its .avsc and .json files, sorted, and the
// folder itself as a flow path when it holds YAML files.
func schemaFiles(args []string) (files, flowPaths []string, err error) {
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return nil, nil, failed("%s cannot be read: %v", a, err)
		}
		if !fi.IsDir() {
			if isYAML(a) {
				flowPaths = append(flowPaths, a)
			} else {
				files = append(files, a)
			}
			continue
		}
		yaml := false
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := strings.ToLower(filepath.Ext(p)); !d.IsDir() && (ext == ".avsc" || ext == ".json") {
				files = append(files, p)
			}
			yaml = yaml || !d.IsDir() && isYAML(p)
			return nil
		})
		if err != nil {
			return nil, nil, failed("%s cannot be read: %v", a, err)
		}
		if yaml {
			flowPaths = append(flowPaths, a)
		}
	}
	return files, flowPaths, nil
}

func isYAML(p string) bool {
	ext := strings.ToLower(filepath.Ext(p))
	return ext == ".yaml" || ext == ".yml"
}

// flowType is an Avro type of a loaded flow.
type flowType struct {
	flow *spec.Flow
	t    *spec.Type
}

// flowAvroTypes loads the flows at paths and returns their Avro types, in
// file and name order, with the .avsc files their $refs name (cleaned OS
// paths). A flow that does not load is an error listing its diagnostics;
// a folder holding no flow (only other YAML) has no types.
func flowAvroTypes(s streams, paths []string) ([]flowType, map[string]bool, error) {
	refd := map[string]bool{}
	var out []flowType
	for _, p := range paths {
		set, err := spec.LoadPaths(spec.Options{}, p)
		if set != nil {
			for _, n := range set.Notices {
				fmt.Fprintln(s.err, n)
			}
		}
		var ds spec.Diagnostics
		if errors.As(err, &ds) && !slices.ContainsFunc(ds, func(d spec.Diagnostic) bool { return d.Code != "no-flows" }) {
			if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
				continue // schema files beside other tools' YAML
			}
		}
		if err != nil {
			return nil, nil, failed("%s does not load, so its Avro types cannot be checked:\n%v", p, err)
		}
		for _, f := range set.Flows {
			for _, t := range f.Types {
				if !t.IsAvro() {
					continue
				}
				out = append(out, flowType{flow: f, t: t})
				if t.Avro.Ref != "" {
					refd[filepath.Clean(filepath.Join(filepath.Dir(f.File), filepath.FromSlash(t.Avro.Ref)))] = true
				}
			}
		}
	}
	return out, refd, nil
}

// checkAvroType checks one flow type's Avro schema against its subject.
func checkAvroType(ctx context.Context, reg schemaRegistry, ft flowType) (checkResult, error) {
	r := checkResult{Path: ft.t.Pos.String(), Type: ft.t.Name, Subject: ft.t.Subject, SchemaType: stores.SchemaAvro}
	p, err := schemacompat.Parse(stores.SchemaAvro, ft.t.Avro.Text)
	if err != nil {
		r.Outcome, r.Reason = "invalid", err.Error()
		return r, nil
	}
	return checkParsed(ctx, reg, r, p)
}

func checkSchemaFile(ctx context.Context, reg schemaRegistry, path, subject string) (checkResult, error) {
	if subject == "" {
		subject = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	r := checkResult{Path: path, Subject: subject}
	typ, err := schemaTypeOf(path, "")
	if err != nil {
		return r, err
	}
	r.SchemaType = typ
	text, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	p, err := schemacompat.Parse(typ, string(text))
	if err != nil {
		r.Outcome, r.Reason = "invalid", err.Error()
		return r, nil
	}
	return checkParsed(ctx, reg, r, p)
}

// checkParsed checks a parsed schema against r.Subject's versions.
func checkParsed(ctx context.Context, reg schemaRegistry, r checkResult, p *schemacompat.Parsed) (checkResult, error) {
	subject, typ := r.Subject, r.SchemaType
	vs, err := reg.SubjectVersions(ctx, subject, false)
	if err != nil {
		return r, err
	}
	if len(vs) == 0 {
		r.Outcome = "new-subject"
		return r, nil
	}
	for _, v := range vs {
		if v.Type.OrAvro() == typ {
			if old, err := schemacompat.Parse(v.Type, v.Text); err == nil && old.Canonical == p.Canonical {
				r.Outcome, r.Version = "registered", v.Version
				return r, nil
			}
		}
	}
	if r.Compatibility, err = reg.Compatibility(ctx, subject); err != nil {
		return r, err
	}
	against := vs
	if !r.Compatibility.Transitive() {
		against = vs[len(vs)-1:]
	}
	if r.Compatibility != stores.CompatNone {
		for _, v := range against {
			r.Versions = append(r.Versions, v.Version)
		}
	}
	err = schemacompat.Check(r.Compatibility, p, vs)
	var ie *stores.IncompatibleSchemaError
	switch {
	case errors.As(err, &ie):
		r.Outcome, r.Version, r.Direction, r.Field, r.Reason = "incompatible", ie.Version, ie.Direction, ie.Path, ie.Reason
	case err != nil:
		return r, err
	default:
		r.Outcome = "compatible"
	}
	return r, nil
}

func renderCheck(w io.Writer, results []checkResult) {
	bad := 0
	for _, r := range results {
		if r.Type != "" {
			r.Path += ": type " + r.Type
		}
		switch r.Outcome {
		case "compatible":
			if len(r.Versions) == 0 {
				fmt.Fprintf(w, "%s: %s: compatible (level NONE: nothing checked)\n", r.Path, r.Subject)
				continue
			}
			fmt.Fprintf(w, "%s: %s: compatible under %s with %s\n", r.Path, r.Subject, r.Compatibility, versionList(r.Versions))
		case "registered":
			fmt.Fprintf(w, "%s: %s: registered already, as version %d\n", r.Path, r.Subject, r.Version)
		case "new-subject":
			fmt.Fprintf(w, "%s: %s: a new subject, nothing to check against\n", r.Path, r.Subject)
		case "invalid":
			bad++
			fmt.Fprintf(w, "%s: %s: invalid: %s\n", r.Path, r.Subject, r.Reason)
		case "incompatible":
			bad++
			who := fmt.Sprintf("the new schema cannot read what version %d wrote", r.Version)
			if r.Direction == "forward" {
				who = fmt.Sprintf("version %d cannot read what the new schema writes", r.Version)
			}
			fmt.Fprintf(w, "%s: %s: incompatible under %s: %s: at %s: %s\n", r.Path, r.Subject, r.Compatibility, who, r.Field, r.Reason)
		}
	}
	if bad > 0 {
		fmt.Fprintf(w, "%d of %d schemas incompatible or invalid\n", bad, len(results))
	}
}

func versionList(vs []int) string {
	if len(vs) == 1 {
		return fmt.Sprintf("version %d", vs[0])
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return "versions " + strings.Join(parts, ", ")
}
