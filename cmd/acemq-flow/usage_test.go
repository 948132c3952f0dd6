package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestBoolFlagsShowNoArgumentName reads every command's --help: pflag takes
// a backquoted word in a usage string for the flag's argument name, which
// makes a boolean flag look as if it took a value.
func TestBoolFlagsShowNoArgumentName(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(strings.Join(append([]string{"acemq-flow"}, path...), " "), func(t *testing.T) {
			out, errOut, code := cli(t, append(path, "--help")...)
			if code != 0 {
				t.Fatalf("acemq-flow %s --help: exit %d\nstderr: %s", strings.Join(path, " "), code, errOut)
			}
			check := func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					t.Errorf("flag --%s of %q: usage %q has a backquote, which pflag shows as the argument name", f.Name, c.CommandPath(), f.Usage)
				}
				if f.Value.Type() != "bool" {
					return
				}
				// Two spaces after the flag: the column before its usage.
				line := regexp.MustCompile(`(?m)^ +(-\w, )?--` + regexp.QuoteMeta(f.Name) + `\b.*$`).FindString(out)
				if !strings.Contains(line, "--"+f.Name+"  ") {
					t.Errorf("acemq-flow %s --help shows the boolean flag --%s with an argument: %q", strings.Join(path, " "), f.Name, line)
				}
			}
			c.NonInheritedFlags().VisitAll(check)
			c.InheritedFlags().VisitAll(check)
		})
	}
	walk(newRootCmd(streams{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &bytes.Buffer{}}))
}

func TestUsageErrorsExit2(t *testing.T) {
	// The relay cases fail before the store is opened: a path nothing
	// creates will do.
	store := "sqlite:" + filepath.Join(t.TempDir(), "unused.db")
	empty := t.TempDir()
	cases := []struct {
		name string
		args []string
		want []string // on stderr
	}{
		{"no command prints the usage", nil, []string{"Usage:", "name a command"}},
		{"an unknown command", []string{"valdate", "x.yaml"}, []string{`unknown command "valdate"`, "acemq-flow validate"}},
		{"consumers without a subcommand", []string{"consumers"}, []string{"name a command", "acemq-flow consumers --help"}},
		{"consumers with an unknown subcommand", []string{"consumers", "bogus"}, []string{`unknown command "bogus" for "acemq-flow consumers"`}},
		{"outbox with an unknown subcommand", []string{"outbox", "bogus"}, []string{`unknown command "bogus"`}},
		{"completion with an unknown shell", []string{"completion", "bogus"}, []string{`unknown command "bogus"`}},
		{"consumers start without an id", []string{"consumers", "start"}, []string{"name the consumer id", "acemq-flow consumers list"}},
		{"consumers stop with two ids", []string{"consumers", "stop", "a", "b"}, []string{"takes 1 argument(s), not 2"}},
		{"consumers scale to 0", []string{"consumers", "scale", "fulfilment.reserve", "0"}, []string{"size must be 1 or more (a group needs at least one consumer), not 0"}},
		{"consumers prefetch 0", []string{"consumers", "prefetch", "fulfilment.reserve", "0"}, []string{"prefetch must be from 1 to 65535"}},
		{"consumers prefetch beyond basic.qos", []string{"consumers", "prefetch", "fulfilment.reserve", "65536"}, []string{"from 1 to 65535"}},
		{"consumers scale to a word", []string{"consumers", "scale", "fulfilment.reserve", "two"}, []string{`size "two" is not a whole number; give 1 or more`}},
		{"send with flows but no target", []string{"send", "../../examples/flows/fulfilment.yaml", "--data", "{}"}, []string{"say where to send", "--pipeline", "--exchange"}},
		{"send to a pipeline and an exchange", []string{"send", "--pipeline", "fulfilment", "--exchange", "x", "--routing-key", "k", "--data", "-"}, []string{"--pipeline cannot be used with --exchange or --routing-key"}},
		{"send to a pipeline and an itinerary", []string{"send", "--pipeline", "a", "--itinerary", "b", "--data", "{}"}, []string{"--pipeline and --itinerary cannot be used together"}},
		{"send to a pipeline without a payload", []string{"send", "../../examples/flows/fulfilment.yaml", "--pipeline", "fulfilment"}, []string{"--pipeline fulfilment needs a payload", "--data"}},
		{"send to an itinerary without a payload, without flows", []string{"send", "--itinerary", "order-approval"}, []string{"--itinerary order-approval needs a payload"}},
		{"relay with a zero batch", []string{"relay", "--store", store, "--batch", "0"}, []string{"--batch must be 1 or more, not 0"}},
		{"relay with a zero lease", []string{"relay", "--store", store, "--lease", "0s"}, []string{"--lease must be a positive duration"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			if code != 2 {
				t.Errorf("acemq-flow %s: exit %d, want 2\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("acemq-flow %s: stderr lacks %q:\n%s", strings.Join(tc.args, " "), w, errOut)
				}
			}
			if strings.Contains(errOut, "expected object") {
				t.Errorf("acemq-flow %s: stderr speaks of the payload's type instead of the usage: %s", strings.Join(tc.args, " "), errOut)
			}
		})
	}

	t.Run("help exits 0", func(t *testing.T) {
		for _, args := range [][]string{{"--help"}, {"help"}, {"consumers", "--help"}, {"outbox", "--help"}} {
			if out, errOut, code := cli(t, args...); code != 0 || !strings.Contains(out, "Usage:") {
				t.Errorf("acemq-flow %s: exit %d, want 0 and the usage on stdout\nstderr: %s", strings.Join(args, " "), code, errOut)
			}
		}
	})

	t.Run("validate names the folder without flow files", func(t *testing.T) {
		out, _, code := cli(t, "validate", empty)
		if code != 1 || !strings.HasPrefix(out, empty+": error: no flow files found") {
			t.Errorf("acemq-flow validate %s: exit %d, stdout %q; want 1 and the folder named", empty, code, out)
		}
	})
}

// TestHelpHidesSecretsFromTheEnvironment: --help prints each flag's default,
// which the environment sets.
func TestHelpHidesSecretsFromTheEnvironment(t *testing.T) {
	t.Setenv("ACEMQ_AMQP_URL", "amqp://flow:amqp-s3cret@mq:5672/")
	t.Setenv("ACEMQ_STORE_URL", "postgres://flow:store-s3cret@db/flows")
	t.Setenv("ACEMQ_ADMIN_TOKEN", "token-s3cret")
	t.Setenv("ACEMQ_MANAGEMENT_URL", "http://mgmt:mgmt-s3cret@mq:15672")
	for _, args := range [][]string{{"run", "--help"}, {"relay", "--help"}, {"consumers", "list", "--help"}, {"send", "--help"}, {"outbox", "list", "--help"}, {"migrate", "--help"}} {
		out, _, code := cli(t, args...)
		if code != 0 || strings.Contains(out, "s3cret") {
			t.Errorf("acemq-flow %s: exit %d, want 0 and no secret:\n%s", strings.Join(args, " "), code, out)
		}
	}
	if out, _, _ := cli(t, "run", "--help"); !strings.Contains(out, "postgres://flow:xxxxx@db/flows") {
		t.Errorf("acemq-flow run --help hides the store URL entirely; want it redacted:\n%s", out)
	}
}

func TestInspectHelpWarnsAboutQuorumQueues(t *testing.T) {
	out, _, _ := cli(t, "inspect", "--help")
	for _, want := range []string{"counts one delivery of each message shown", "x-delivery-limit", "dead-lettered", "may change their order"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("inspect --help lacks %q:\n%s", want, out)
		}
	}
}
