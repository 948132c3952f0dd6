package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestAMQPFlagTakesSeveralURLs(t *testing.T) {
	cases := []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"the default comes from the environment", "amqp://u:p@env:5672/", nil, "amqp://u:p@env:5672/"},
		{"the first flag replaces the environment's", "amqp://u:p@env:5672/", []string{"--amqp", "amqp://u:p@a:5681/"}, "amqp://u:p@a:5681/"},
		{"repeated flags add up", "", []string{"--amqp", "amqp://u:p@a:5681/", "--amqp", "amqp://u:p@b:5682/"}, "amqp://u:p@a:5681/,amqp://u:p@b:5682/"},
		{"commas and repeats mix", "", []string{"--amqp", "amqp://u:p@a:5681/,amqp://u:p@b:5682/", "--amqp=amqp://u:p@c:5683/"}, "amqp://u:p@a:5681/,amqp://u:p@b:5682/,amqp://u:p@c:5683/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ACEMQ_AMQP_URL", tc.env)
			f := pflag.NewFlagSet("run", pflag.ContinueOnError)
			var got string
			amqpFlag(f, &got)
			if err := f.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if tc.env == "" && len(tc.args) == 0 {
				return
			}
			if got != tc.want {
				t.Errorf("--amqp from %q and %q = %q, want %q", tc.env, tc.args, got, tc.want)
			}
		})
	}
}

func TestHelpRedactsEveryAMQPURL(t *testing.T) {
	t.Setenv("ACEMQ_AMQP_URL", "amqp://flow:s3cret-a@mq1:5672/,amqp://flow:s3cret-b@mq2:5672/")
	out, _, code := cli(t, "run", "--help")
	if code != 0 || strings.Contains(out, "s3cret") || !strings.Contains(out, "amqp://flow:xxxxx@mq1:5672/,amqp://flow:xxxxx@mq2:5672/") {
		t.Errorf("acemq-flow run --help: exit %d, want 0 and both URLs shown redacted:\n%s", code, out)
	}
}
