package spec

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
)

// Limits on `when` expressions (research/reliability.md §6.1): the node
// count bounds compile cost, the memory budget bounds what one evaluation
// may allocate. expr has no wall-clock limit; these two bound it.
const (
	maxExprNodes  = 2000
	maxExprLength = 16384
	exprMemory    = 100_000
)

// Condition is a `when` expression over the message: `payload` is the
// decoded JSON payload. It is compiled and type-checked at load time; Eval
// runs it on a message.
type Condition struct {
	Source  string `json:"when,omitempty"`
	Pos     Pos    `json:"-"`
	quoted  bool   // written in quotes: its text starts a column after Pos
	inexact bool   // its text's columns do not follow Pos: errors point at Pos
	program *vm.Program
}

// runEnv is what a compiled condition runs on.
type runEnv struct {
	Payload any `expr:"payload"`
}

// IsZero reports whether no condition was written (the stop or step always
// applies).
func (c Condition) IsZero() bool { return c.Source == "" }

// Eval evaluates the condition on a decoded JSON payload (as DecodeJSON
// returns it). An empty condition is true. An evaluation error (a field
// missing from this payload, the memory budget exceeded) is returned, never
// taken as false.
func (c Condition) Eval(payload any) (bool, error) {
	if c.Source == "" {
		return true, nil
	}
	if c.program == nil {
		return false, fmt.Errorf("condition %q was not compiled", c.Source)
	}
	machine := vm.VM{MemoryBudget: exprMemory}
	out, err := machine.Run(c.program, runEnv{Payload: payload})
	if err != nil {
		return false, fmt.Errorf("when %q: %w", c.Source, err)
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("when %q returned %T, not a boolean", c.Source, out)
	}
	return b, nil
}

// compileCondition type-checks src against the payload's type (nil: any
// payload) and compiles the program Eval runs on decoded JSON.
func compileCondition(src string, payloadType *Type) (Condition, error) {
	c := Condition{Source: src}
	if len(src) > maxExprLength {
		return c, fmt.Errorf("the expression is %d characters long, over the limit of %d", len(src), maxExprLength)
	}
	opts := []expr.Option{expr.AsBool(), expr.MaxNodes(maxExprNodes)}
	if payloadType.compiled() {
		// Checked against a struct typed from the schema, so that a
		// misspelt field or a string compared with a number fails here,
		// in CI, not at 3 a.m.
		env := reflect.New(reflect.StructOf([]reflect.StructField{{
			Name: "Payload", Type: payloadType.envType(), Tag: `expr:"payload"`,
		}})).Elem().Interface()
		if _, err := expr.Compile(src, append(opts, expr.Env(env))...); err != nil && !unmodelled(err) {
			return c, err
		}
	}
	// The program that runs sees payloads as decoded JSON.
	prog, err := expr.Compile(src, append(opts, expr.Env(runEnv{}))...)
	if err != nil {
		return c, err
	}
	c.program = prog
	return c, nil
}

// unmodelled reports whether a typed compile failed because an object is
// modelled as a struct (len, keys and values are defined on the decoded
// JSON map the program runs on, not on a struct) rather than because of
// the expression: a missing field or a mismatched type names no struct.
// Such an expression is compiled untyped and checked when it runs.
func unmodelled(err error) bool {
	msg := err.Error()
	var fe *file.Error
	if errors.As(err, &fe) {
		msg = fe.Message
	}
	msg = firstLine(msg)
	return strings.Contains(msg, "struct {") && !noField.MatchString(msg)
}

// exprErrorPos returns the position of an expr compile error inside the
// expression text, relative to where the value starts.
func exprErrorPos(err error, at Pos, quoted, inexact bool) (Pos, string) {
	var fe *file.Error
	if errors.As(err, &fe) {
		p := at
		if fe.Line <= 1 && !inexact {
			p.Col += fe.Column
			if quoted {
				p.Col++
			}
		}
		return p, fe.Message
	}
	return at, err.Error()
}
