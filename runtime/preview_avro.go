package runtime

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-flow/runtime/codec"
)

// AvroPreviews reads Avro bodies for the previews of the status page and
// the admin API's dead letters (ops.Decoder, ops.StatusReads.Decoder) with
// the runtime's own codec: by the writer's schema id in each frame, looked
// up in the runtime's registry (the cache its consumers fill), never
// resolved to a reader's type, as `inspect --registry` reads them. It is
// safe for concurrent use.
type AvroPreviews struct{ c *codec.Codec }

// AvroPreviews returns the runtime's reader of Avro previews, or nil when
// its flows have no Avro type (and so no registry to read schemas from).
func (r *Runtime) AvroPreviews() *AvroPreviews {
	if r.codec == nil {
		return nil
	}
	return &AvroPreviews{c: r.codec}
}

// Framed reports whether a message of content type ct with body is in the
// Avro framing (FLOW-FORMAT §6), and the writer's schema id its frame names
// (0 when the frame cannot be read). A nil *AvroPreviews frames nothing.
func (a *AvroPreviews) Framed(ct string, body []byte) (int, bool) {
	if a == nil || !codec.IsAvro(ct, body) {
		return 0, false
	}
	id, _, err := codec.ReadFrame(body)
	if err != nil {
		return 0, true
	}
	return id, true
}

// Decode returns body as JSON, decoded by its writer's schema; its error
// says why it cannot (an unknown id, data that does not read, the
// registry failing). An error of the registry failing has an
// Unavailable() bool method that reports true: a read of several
// messages (ops.InspectManyWith) does not ask again for the others.
func (a *AvroPreviews) Decode(ctx context.Context, body []byte) ([]byte, error) {
	js, _, err := a.c.Decode(ctx, nil, body)
	if err != nil && !codec.Fatal(err) {
		return nil, &registryUnavailableError{err: err}
	}
	return js, err
}

// registryUnavailableError is a preview the schema registry could not be
// asked for.
type registryUnavailableError struct{ err error }

func (e *registryUnavailableError) Error() string {
	return fmt.Sprintf("the runtime's schema registry could not be asked for the writer's schema: %v; the preview is decoded once the store answers", e.err)
}

func (e *registryUnavailableError) Unwrap() error { return e.err }

// Unavailable reports true: the registry, not the message, failed.
func (e *registryUnavailableError) Unavailable() bool { return true }
