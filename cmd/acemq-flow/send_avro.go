package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/codec"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/spec"
	"github.com/acemq/acemq-flow/stores"
)

// sendAvro returns msg as send publishes it when typ, the input type of
// the target's entry, is Avro (FLOW-FORMAT §6): its JSON encoded by typ's
// schema in the Confluent framing, with the id the registry has for it
// under typ's subject. The registry is registryURL, a Confluent-compatible
// one, or by default the running runtime's admin listener (adminAddr,
// with token), which serves the registry the runtime registered the
// flows' types in at start. Nothing is registered here. A nil typ leaves
// msg unchanged.
func sendAvro(ctx context.Context, registryURL, adminAddr, token string, typ *spec.Type, msg decide.Message) (decide.Message, error) {
	if typ == nil {
		return msg, nil
	}
	reg, where, err := cliRegistry(registryURL, adminAddr, token)
	if err != nil {
		return msg, usage("%v", err)
	}
	out, err := runtime.EncodeMessage(ctx, codec.New(restCodecRegistry{reg}, codec.Options{ReadOnly: true}), typ, msg)
	switch {
	case err == nil:
		return out, nil
	case codec.Fatal(err):
		return msg, failed("the payload does not fit Avro type %s: %v", typ.Name, err)
	}
	return msg, failed("the payload's type %s is Avro, and its schema id could not be had from %s: %v; run the flows (acemq-flow run registers their types) with --admin there, or give --registry naming the registry they use",
		typ.Name, where, err)
}

// restCodecRegistry is a restRegistry as the codec reads a registry:
// looking a schema up under a subject, and a schema by its id.
type restCodecRegistry struct{ *restRegistry }

func (r restCodecRegistry) LookupSchema(ctx context.Context, subject string, typ stores.SchemaType, text string) (stores.SchemaVersion, bool, error) {
	req := map[string]string{"schema": text}
	if typ.OrAvro() != stores.SchemaAvro {
		req["schemaType"] = string(typ)
	}
	v, found, err := r.lookup(ctx, subject, req)
	if err != nil || !found {
		return stores.SchemaVersion{}, false, err
	}
	return *v, true, nil
}

func (r restCodecRegistry) SchemaByID(ctx context.Context, id int) (stores.Schema, bool, error) {
	var out struct {
		Schema     string `json:"schema"`
		SchemaType string `json:"schemaType"`
	}
	err := r.call(ctx, "GET", "/schemas/ids/"+strconv.Itoa(id), nil, &out)
	var re *restError
	if errors.As(err, &re) && re.Status == http.StatusNotFound {
		return stores.Schema{}, false, nil
	}
	if err != nil {
		return stores.Schema{}, false, err
	}
	return stores.Schema{ID: id, Type: stores.SchemaType(out.SchemaType).OrAvro(), Text: out.Schema}, true, nil
}
