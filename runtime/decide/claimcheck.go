package decide

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The claim check on the wire (FLOW-FORMAT §6): a message whose body went
// to the blob store carries the blob's key in this header and a small JSON
// reference as its body, with this content type.
const (
	HeaderClaimCheck      = "x-acemq-claim-check"
	ClaimCheckContentType = "application/vnd.acemq.claim-check+json"
)

// DefaultClaimCheckAbove is the claim-check threshold when neither the type
// nor the flow's defaults set claim_check.above: a body of more than 64 KiB
// goes to the blob store (patterns.txt, "Only above a threshold").
const DefaultClaimCheckAbove int64 = 64 << 10

// ClaimCheckKind is the dead-letter kind (x-acemq-error-kind) of a message
// whose claim check cannot be honoured: a malformed reference, a blob that
// is missing or fails its SHA-256 check. Such a message is never retried.
const ClaimCheckKind = "claim-check"

// ClaimCheck is a reference to a body kept in the blob store: Key is
// "sha256:" and the hex SHA-256 of the body, Size its length in bytes and
// ContentType the body's own content type (what a handler is told it is).
type ClaimCheck struct {
	Key         string `json:"claim_check"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
}

// ClaimCheckError is a message that says it is claim-checked but whose
// reference cannot be read: the header and the body disagree, the body is
// not the reference JSON, or the key is not sha256:<64 hex digits>. It is
// permanent: the message is dead-lettered (kind ClaimCheckKind) with the
// error as its reason.
type ClaimCheckError struct {
	Reason string
}

// Error says what is wrong with the reference.
func (e *ClaimCheckError) Error() string {
	return "malformed claim-check reference: " + e.Reason
}

// ClaimCheckAbove returns the threshold in force: above when it is set
// (positive), DefaultClaimCheckAbove otherwise.
func ClaimCheckAbove(above int64) int64 {
	if above > 0 {
		return above
	}
	return DefaultClaimCheckAbove
}

// ShouldClaimCheck reports whether a body of size bytes goes to the blob
// store under threshold above (0: the default): only a body larger than
// the threshold does; one of exactly the threshold travels inline.
func ShouldClaimCheck(size int, above int64) bool {
	return int64(size) > ClaimCheckAbove(above)
}

// WithClaimCheck returns m carrying ref instead of its body: the header,
// the reference JSON as body and ClaimCheckContentType. m's headers are
// copied, never changed. Every other property (content encoding included,
// which describes the body in the blob) is kept.
func WithClaimCheck(m Message, ref ClaimCheck) Message {
	m.Headers = copyTable(m.Headers)
	m.Headers[HeaderClaimCheck] = ref.Key
	m.ContentType = ClaimCheckContentType
	m.Body = ref.Body()
	return m
}

// Body returns the reference's JSON body:
// {"claim_check":"sha256:<hex>","size":N,"content_type":"…"}.
func (ref ClaimCheck) Body() []byte {
	b, _ := json.Marshal(ref) // three plain fields: cannot fail
	return b
}

// ReadClaimCheck tells what an arriving message carries, without being told
// (FLOW-FORMAT §6): a message with the x-acemq-claim-check header, the
// claim-check content type, or both, is a reference, returned with ok
// true; any other message (a body below the threshold, or one written
// before the claim check existed: no header, a plain body) carries its body
// inline, and ok is false. A message that says it is a reference but is not
// a well-formed one is a *ClaimCheckError.
func ReadClaimCheck(m Message) (ref ClaimCheck, ok bool, err error) {
	header, hasHeader := m.Headers[HeaderClaimCheck]
	hasHeader = hasHeader && !blankHeader(header)
	if !hasHeader && !isClaimCheckType(m.ContentType) {
		return ClaimCheck{}, false, nil
	}
	ref, err = parseClaimCheck(m.Body)
	if err != nil {
		return ClaimCheck{}, true, err
	}
	if hasHeader {
		if h := strings.TrimSpace(HeaderText(header)); h != ref.Key {
			return ClaimCheck{}, true, &ClaimCheckError{Reason: fmt.Sprintf("header %s is %q but the body's claim_check is %q", HeaderClaimCheck, h, ref.Key)}
		}
	}
	return ref, true, nil
}

// isClaimCheckType reports the claim-check content type, with any case and
// parameters (application/vnd.acemq.claim-check+json; charset=utf-8).
func isClaimCheckType(ct string) bool {
	media, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(media), ClaimCheckContentType)
}

func parseClaimCheck(body []byte) (ClaimCheck, error) {
	var raw struct {
		Key         *string          `json:"claim_check"`
		Size        *json.RawMessage `json:"size"`
		ContentType *string          `json:"content_type"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return ClaimCheck{}, &ClaimCheckError{Reason: fmt.Sprintf("the body is not the reference JSON {\"claim_check\":\"sha256:<hex>\",\"size\":N,\"content_type\":\"…\"}: %v", err)}
	}
	if dec.More() {
		return ClaimCheck{}, &ClaimCheckError{Reason: "the body has data after the reference JSON"}
	}
	var ref ClaimCheck
	switch {
	case raw.Key == nil:
		return ClaimCheck{}, &ClaimCheckError{Reason: "the body has no claim_check key"}
	case !validClaimCheckKey(*raw.Key):
		return ClaimCheck{}, &ClaimCheckError{Reason: fmt.Sprintf("claim_check %q is not sha256: followed by 64 lower-case hex digits", *raw.Key)}
	case raw.Size == nil:
		return ClaimCheck{}, &ClaimCheckError{Reason: "the body has no size"}
	}
	ref.Key = *raw.Key
	n, err := strconv.ParseInt(string(*raw.Size), 10, 64)
	if err != nil || n < 0 {
		return ClaimCheck{}, &ClaimCheckError{Reason: fmt.Sprintf("size %s is not a whole number of bytes", *raw.Size)}
	}
	ref.Size = n
	if raw.ContentType != nil {
		ref.ContentType = *raw.ContentType
	}
	return ref, nil
}

// validClaimCheckKey is the key's form: the blob store's (stores.BlobKey),
// checked here too because decide does not import the stores.
func validClaimCheckKey(key string) bool {
	d, ok := strings.CutPrefix(key, "sha256:")
	return ok && len(d) == 64 && strings.Trim(d, "0123456789abcdef") == ""
}

// RestoreClaimCheck returns m as its sender wrote it, from the reference
// ref read from it and the body fetched from the blob store (already
// checked against the key there): the body, ref's content type, and no
// claim-check header (m's headers are copied). A body whose length is not
// ref.Size is a *ClaimCheckError.
func RestoreClaimCheck(m Message, ref ClaimCheck, body []byte) (Message, error) {
	if int64(len(body)) != ref.Size {
		return Message{}, &ClaimCheckError{Reason: fmt.Sprintf("the reference says %s is %d bytes, the blob is %d", ref.Key, ref.Size, len(body))}
	}
	m.Headers = copyTable(m.Headers)
	delete(m.Headers, HeaderClaimCheck)
	m.ContentType = ref.ContentType
	m.Body = body
	return m, nil
}
