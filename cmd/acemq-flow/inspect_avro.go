package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/stores"
)

// avroDecoder reads Avro bodies for inspect (ops.Decoder) by their
// writer's schema, fetched by id from a Confluent-compatible registry,
// read-only: the id in a message's frame, the schema it names, never the
// flows' types. After the registry once fails to answer, the other
// messages are not tried: they get the same note.
type avroDecoder struct {
	c     *codec.Codec
	where string
	down  error
}

// cliRegistry is the schema registry send and inspect look Avro types up
// in: --registry, or, without it, the one the runtime at --admin serves
// (with token); where names it for messages.
func cliRegistry(registryURL, adminAddr, token string) (reg *restRegistry, where string, err error) {
	raw, where := registryURL, "--registry "+stores.Redact(registryURL)
	if raw == "" {
		raw, where = adminAddr, "the runtime's admin listener at "+adminAddr
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
	}
	reg, err = newRESTRegistry(raw, token)
	return reg, where, err
}

// newAvroDecoder returns the decoder of inspect's --registry, or, without
// it, of the registry the runtime at --admin serves, as send looks types
// up.
func newAvroDecoder(registryURL, adminAddr, token string) (*avroDecoder, error) {
	reg, where, err := cliRegistry(registryURL, adminAddr, token)
	if err != nil {
		return nil, usage("%v", err)
	}
	return &avroDecoder{c: codec.New(restCodecRegistry{reg}, codec.Options{ReadOnly: true}), where: where}, nil
}

func (a *avroDecoder) Framed(ct string, body []byte) (int, bool) {
	if !codec.IsAvro(ct, body) {
		return 0, false
	}
	id, _, err := codec.ReadFrame(body)
	if err != nil {
		return 0, true
	}
	return id, true
}

func (a *avroDecoder) Decode(ctx context.Context, body []byte) ([]byte, error) {
	if a.down != nil {
		return nil, fmt.Errorf("the schema registry (%s) could not be asked, as for the message above; give --registry, or --admin naming a running runtime", a.where)
	}
	js, _, err := a.c.Decode(ctx, nil, body)
	switch {
	case err == nil:
		return js, nil
	case codec.Fatal(err):
		return nil, err
	}
	a.down = fmt.Errorf("the schema registry (%s) could not be asked for its schema: %v; give --registry, or --admin naming a running runtime", a.where, err)
	return nil, a.down
}
