package main

import (
	"fmt"
	"os"
	"strings"
)

// secretVars are the variables that may hold a credential: each can be
// given instead as NAME_FILE, the path of a file holding the value (a
// Kubernetes or Docker secret mounted as a file), so that the secret is in
// neither the process's arguments nor its environment listing.
var secretVars = []string{
	"ACEMQ_AMQP_URL",
	"ACEMQ_STORE_URL",
	"ACEMQ_MANAGEMENT_URL",
	"ACEMQ_ADMIN_TOKEN",
	"ACEMQ_BLOBS_URL",
	"ACEMQ_SCHEMA_REGISTRY_URL",
}

// secretsFromFiles sets each secret variable given as NAME_FILE from its
// file, before the flags read their defaults from the environment. The
// file's content is the value, without its trailing line ending. It never
// puts the value into an error.
func secretsFromFiles(lookup func(string) (string, bool), set func(string, string) error) error {
	for _, name := range secretVars {
		path, ok := lookup(name + "_FILE")
		if !ok || path == "" {
			continue
		}
		if v, ok := lookup(name); ok && v != "" {
			return fmt.Errorf("both %s and %s_FILE are set; set one of them", name, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s_FILE names %s, which cannot be read (%v); mount the secret there or unset %s_FILE",
				name, path, pathErrReason(err), name)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return fmt.Errorf("%s_FILE names %s, which is empty; write the value into it or unset %s_FILE", name, path, name)
		}
		if err := set(name, v); err != nil {
			return fmt.Errorf("set %s from %s_FILE: %v", name, name, err)
		}
	}
	return nil
}

// pathErrReason is err without the path it repeats.
func pathErrReason(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
