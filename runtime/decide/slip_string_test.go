package decide

import (
	"bytes"
	"encoding/json"
	"testing"
)

// writeString writes what a JSON encoder without HTML escaping writes,
// whether it takes its short path for plain strings or not.
func TestWriteStringMatchesTheEncoder(t *testing.T) {
	for _, s := range []string{"", "orders.validate", "a b~\x7f", `q"uote`, `back\slash`, "tab\t", "<&>", "é", "\u2028", "bad\xff"} {
		var want bytes.Buffer
		e := json.NewEncoder(&want)
		e.SetEscapeHTML(false)
		_ = e.Encode(s)
		var got bytes.Buffer
		got.WriteString("x")
		writeString(&got, s)
		if w := "x" + string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))); got.String() != w {
			t.Errorf("writeString(%q) = %s, want %s", s, got.String(), w)
		}
	}
}
