package main

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-flow/test/testenv"
)

func TestSendTellsAMissingExchangeFromAMissingBinding(t *testing.T) {
	url := testenv.AMQP(t)
	ns := testenv.Names(t)
	cases := []struct {
		name, exchange, want, wantNot string
	}{
		{"an exchange that does not exist", ns + ".nosuchx", `exchange "` + ns + `.nosuchx" does not exist`, "no queue bound"},
		{"an exchange with nothing bound", "amq.direct", `exchange "amq.direct" has no queue bound for key "` + ns + `"`, "does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"send", "--exchange", tc.exchange, "--routing-key", ns, "--data", "{}", "--amqp", url}
			_, errOut, code := cli(t, args...)
			if code != 1 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, tc.wantNot) {
				t.Errorf("acemq-flow %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(args, " "), code, errOut, tc.want)
			}
		})
	}
}
