package host

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"testing"
)

func TestPluginDoesNotInheritACEMQVariables(t *testing.T) {
	t.Setenv("ACEMQ_ADMIN_TOKEN", "s3cret")
	t.Setenv("ACEMQ_AMQP_URL", "amqp://user:s3cret@localhost:5672/")
	p := startTestkit(t, Config{Env: map[string]string{"STOCK_MODE": "test", "ACEMQ_NAMED_BY_FLOW": "yes"}})

	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	env := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	has := func(prefix string) bool {
		return slices.ContainsFunc(env, func(kv []byte) bool { return bytes.HasPrefix(kv, []byte(prefix)) })
	}
	for _, absent := range []string{"ACEMQ_ADMIN_TOKEN=", "ACEMQ_AMQP_URL="} {
		if has(absent) {
			t.Errorf("the plugin's environment has %s…; the runtime's ACEMQ_ variables must not be inherited", absent)
		}
	}
	for _, present := range []string{"PATH=", "STOCK_MODE=test", "ACEMQ_NAMED_BY_FLOW=yes", "ACEMQ_FLOW_PLUGIN="} {
		if !has(present) {
			t.Errorf("the plugin's environment lacks %s…", present)
		}
	}
}
