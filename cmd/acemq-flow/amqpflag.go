package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/acemq/acemq-flow/runtime/broker"
)

// amqpURLs is the value of --amqp: one broker URL, or several (the nodes
// of a cluster), from repeated flags and commas, kept as one string that
// broker.SplitURLs splits again. The first --amqp given replaces the
// default from the environment; the next ones add to it.
type amqpURLs struct {
	urls *string
	set  bool
}

func (v *amqpURLs) Set(s string) error {
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	if !v.set || *v.urls == "" {
		*v.urls, v.set = s, true
		return nil
	}
	*v.urls += "," + s
	return nil
}

// String shows the URLs with their passwords redacted: pflag prints it in
// errors and help.
func (v *amqpURLs) String() string {
	if v.urls == nil {
		return ""
	}
	return broker.RedactURLs(*v.urls)
}

func (v *amqpURLs) Type() string { return "url" }

// amqpFlag adds --amqp, the broker URL every command that talks to the
// broker takes: repeated, or with commas, for the nodes of a cluster, each
// tried in order until one answers, and the next one after a connection is
// lost.
func amqpFlag(f *pflag.FlagSet, url *string) {
	*url = envOr("ACEMQ_AMQP_URL", defaultAMQP)
	f.Var(&amqpURLs{urls: url}, "amqp", "broker URL (env ACEMQ_AMQP_URL); repeat it, or separate URLs with commas, to give every node of a cluster: the first that answers is used, and the next after a lost connection")
}
