package flowtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/acemq/acemq-flow/spec"
)

// Update rewrites, in f's text, every expected list a failure says differs
// with what happened instead, in YAML flow style at the list's place; the
// rest of the file, its comments and layout, stays as it is. It returns
// the new text and how many lists it rewrote.
func Update(f *File, failures []Failure) ([]byte, int) {
	type span struct {
		start, end int
		text       string
	}
	var spans []span
	seen := map[*spec.Node]bool{}
	for _, fl := range failures {
		if fl.at == nil || seen[fl.at] || fl.at.Pos().Line == 0 {
			continue
		}
		seen[fl.at] = true
		start, end, ok := nodeSpan(f.src, fl.at)
		if !ok {
			continue
		}
		text := flowYAML(fl.update)
		if items, ok := fl.update.([]any); ok && f.src[start] == '-' && len(items) > 0 {
			// A block list stays one: an item a line, in flow style.
			lines := make([]string, len(items))
			for i, it := range items {
				lines[i] = "- " + flowYAML(it)
			}
			text = strings.Join(lines, "\n"+strings.Repeat(" ", fl.at.Pos().Col-1))
		}
		spans = append(spans, span{start, end, text})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start > spans[j].start })
	out := slices.Clone(f.src)
	n := 0
	last := len(out) + 1
	for _, s := range spans {
		if s.end > last {
			continue // inside a list already rewritten
		}
		out = append(out[:s.start], append([]byte(s.text), out[s.end:]...)...)
		last = s.start
		n++
	}
	return out, n
}

// WriteUpdate rewrites f's file on disk with Update's text.
func WriteUpdate(f *File, failures []Failure) (int, error) {
	text, n := Update(f, failures)
	if n == 0 {
		return 0, nil
	}
	st, err := os.Stat(f.Path)
	if err != nil {
		return 0, err
	}
	return n, os.WriteFile(f.Path, text, st.Mode().Perm())
}

// nodeSpan is the bytes n takes in src: from its first character to its
// closing bracket, for a flow list, or to the end of its last line.
func nodeSpan(src []byte, n *spec.Node) (start, end int, ok bool) {
	start = offset(src, n.Pos().Line, n.Pos().Col)
	if start < 0 || start >= len(src) {
		return 0, 0, false
	}
	if src[start] == '-' {
		// a block sequence: its items end where the last one does
	} else if src[start] != '[' {
		return 0, 0, false
	}
	maxLine := lastLine(n)
	line := n.Pos().Line
	depth := 0
	var quote byte
	for i := start; i < len(src); i++ {
		ch := src[i]
		switch {
		case quote != 0:
			if ch == quote && (quote == '\'' || src[i-1] != '\\') {
				quote = 0
			}
		case ch == '"' || ch == '\'':
			quote = ch
		case ch == '#' && (i == 0 || src[i-1] == ' '):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
		case ch == '[' || ch == '{':
			depth++
		case ch == ']' || ch == '}':
			depth--
			if depth == 0 && src[start] == '[' {
				return start, i + 1, true
			}
		case ch == '\n':
			if depth == 0 && line >= maxLine {
				return start, i, true
			}
			line++
		}
	}
	return start, len(src), true
}

func lastLine(n *spec.Node) int {
	l := n.Pos().Line
	for _, c := range append(append(slices.Clone(n.Keys()), n.Vals()...), n.Items()...) {
		l = max(l, lastLine(c))
	}
	return l
}

// offset is the byte offset of 1-based line and column in src.
func offset(src []byte, line, col int) int {
	i := 0
	for l := 1; l < line; l++ {
		j := bytes.IndexByte(src[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
	}
	return i + col - 1
}

// keyOrder is the order keys are written in by --update.
var keyOrder = []string{"saga", "schedule", "queue", "exchange", "routing_key", "to", "outcome", "state", "attempt", "delay", "in", "kind", "error_kind", "stopped_at", "tick", "error", "steps", "compensations", "payload"}

// flowYAML writes v as YAML in flow style.
func flowYAML(v any) string {
	var b strings.Builder
	writeFlow(&b, normal(v))
	return b.String()
}

func writeFlow(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case float64:
		raw, _ := json.Marshal(x)
		b.Write(raw)
	case string:
		b.WriteString(scalar(x))
	case []any:
		b.WriteByte('[')
		for i, it := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeFlow(b, it)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, c := slices.Index(keyOrder, keys[i]), slices.Index(keyOrder, keys[j])
			if a < 0 {
				a = len(keyOrder)
			}
			if c < 0 {
				c = len(keyOrder)
			}
			if a != c {
				return a < c
			}
			return keys[i] < keys[j]
		})
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(scalar(k))
			b.WriteString(": ")
			writeFlow(b, x[k])
		}
		b.WriteByte('}')
	default:
		fmt.Fprint(b, x)
	}
}

var plain = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./@+-]*( [A-Za-z0-9_./@+-]+)*$`)

// scalar is s as a YAML scalar in a flow collection: plain when it reads
// back as the same string, quoted otherwise.
func scalar(s string) string {
	switch strings.ToLower(s) {
	case "", "null", "true", "false", "yes", "no", "on", "off", "~":
		return strconv.Quote(s)
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return strconv.Quote(s)
	}
	if plain.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}
