package main

import (
	"strings"
	"testing"
)

// TestSendSagaRefusesWhatStartsNoInstance: send --saga names the sagas it
// knows when the name is not one, and refuses a payload that is not the
// saga's input, naming the type, before it connects to anything.
func TestSendSagaRefusesWhatStartsNoInstance(t *testing.T) {
	flow := "../../examples/flows/place-order.yaml"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown saga", []string{"--saga", "refund-order", "--data", "{}"}, `no saga "refund-order" in the flows; known: [place-order]`},
		{"a payload that is not its input", []string{"--saga", "place-order", "--data", `{"order_id":1}`}, `saga "place-order": the payload is not a valid Order`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"send", flow, "--amqp", "amqp://guest:guest@127.0.0.1:1/"}, tc.args...)
			_, errOut, code := cli(t, args...)
			if code != 1 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "connect") {
				t.Errorf("send %v = %d, %q; want exit 1 saying %q, before connecting", tc.args, code, errOut, tc.want)
			}
		})
	}
}
