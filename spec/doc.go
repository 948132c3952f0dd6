// Package spec loads flow files into a validated Flow model.
//
// It owns the flow file format of FLOW-FORMAT.md §1: YAML parsed with
// positions (goccy/go-yaml), ${VAR} substitution, the JSON Schema of
// schemas/flow.schema.json, the model with every default filled in, and the
// semantic checks (names, uniqueness, handlers, payload types and the type
// flow between steps, `when` expressions type-checked with expr). Every
// problem is a Diagnostic with a file:line:col position, a stable code, what
// is wrong and how to fix it; all problems of a file are reported at once.
//
// spec imports nothing of the runtime, the broker, plugins or stores: a flow
// is checked on a laptop with no broker and no database.
//
// Entry points, in the order a caller uses them:
//
//  1. Load (an fs.FS and paths) or LoadPaths (OS paths, as the command
//     line gives them) returns a Set of Flows, or Diagnostics as the error.
//  2. The Flow model: pipelines and steps, itineraries and stops,
//     consumers, sagas, schedules, topology; Flow.Type and Flow.Plugin
//     resolve names scoped to the file.
//  3. At run time, Type.Validate checks payloads and Condition.Eval
//     evaluates `when` on a decoded payload (DecodeJSON).
//
// Hostile input gets an error, never a panic or a hang: files are limited
// in size, nesting and alias expansion, `$ref` files must stay inside the
// flow file's folder, and expressions are bounded in size and in the memory
// one evaluation may use.
package spec
