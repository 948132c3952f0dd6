package schemas

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
)

// TestReadmeFollowsTheSchema checks that README.md's reference carries the
// description of every mapping in flow.schema.json and of each of its keys,
// word for word, so that the page and the hover text say the same thing.
func TestReadmeFollowsTheSchema(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var schema any
	if err := json.Unmarshal(FlowSchema, &schema); err != nil {
		t.Fatalf("flow.schema.json: %v", err)
	}
	want := map[string]string{} // description by where it is
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				if d, ok := v["description"].(string); ok {
					want[at] = d
				}
				for k, p := range props {
					p, _ := p.(map[string]any) // nil for `false`: the key is refused there
					if d, ok := p["description"].(string); ok {
						want[at+"/properties/"+k] = d
					}
				}
			}
			for k, x := range v {
				walk(at+"/"+k, x)
			}
		case []any:
			for _, x := range v {
				walk(at+"/[]", x)
			}
		}
	}
	walk("#", schema)
	if len(want) < 50 {
		t.Fatalf("found %d descriptions in flow.schema.json, want the whole format", len(want))
	}
	var missing []string
	for at, d := range want {
		// A table cell escapes the pipes of its text.
		if !strings.Contains(string(readme), d) && !strings.Contains(string(readme), strings.ReplaceAll(d, "|", `\|`)) {
			missing = append(missing, at+": "+d)
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("README.md lacks the description at %s", m)
	}
}
