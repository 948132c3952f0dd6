package decide

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// The wire names and the body of FLOW-FORMAT §6.
func TestClaimCheckWireFormat(t *testing.T) {
	if HeaderClaimCheck != "x-acemq-claim-check" {
		t.Errorf("HeaderClaimCheck = %q, want x-acemq-claim-check", HeaderClaimCheck)
	}
	if ClaimCheckContentType != "application/vnd.acemq.claim-check+json" {
		t.Errorf("ClaimCheckContentType = %q", ClaimCheckContentType)
	}
	key := sha([]byte("x"))
	got := string(ClaimCheck{Key: key, Size: 70000, ContentType: "application/json"}.Body())
	want := `{"claim_check":"` + key + `","size":70000,"content_type":"application/json"}`
	if got != want {
		t.Errorf("ClaimCheck.Body() = %s, want %s", got, want)
	}
}

func TestShouldClaimCheck(t *testing.T) {
	cases := []struct {
		name  string
		size  int
		above int64
		want  bool
	}{
		{"a small body travels inline under the default threshold", 1 << 10, 0, false},
		{"a body of exactly 64 KiB travels inline under the default threshold", 64 << 10, 0, false},
		{"a body one byte over 64 KiB goes by claim check under the default threshold", 64<<10 + 1, 0, true},
		{"a 10 MiB body goes by claim check under the default threshold", 10 << 20, 0, true},
		{"a type's threshold of 1 MiB keeps a 100 KiB body inline", 100 << 10, 1 << 20, false},
		{"a type's threshold of 4 KiB sends a 5 KiB body by claim check", 5 << 10, 4 << 10, true},
		{"an empty body never goes by claim check", 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ShouldClaimCheck(tc.size, tc.above); got != tc.want {
				t.Fatalf("ShouldClaimCheck(%d, %d) = %v, want %v", tc.size, tc.above, got, tc.want)
			}
		})
	}
}

func TestWithClaimCheckThenRestore(t *testing.T) {
	payload := bytes.Repeat([]byte(`{"line":1}`), 10000)
	orig := Message{MessageID: "m-1", ContentType: "application/json", ContentEncoding: "", Headers: Table{"x-acemq-attempt": int64(2)}, Body: payload}
	ref := ClaimCheck{Key: sha(payload), Size: int64(len(payload)), ContentType: orig.ContentType}
	sent := WithClaimCheck(orig, ref)
	if sent.Headers[HeaderClaimCheck] != ref.Key || sent.ContentType != ClaimCheckContentType || len(sent.Body) > 200 {
		t.Fatalf("WithClaimCheck = header %v, content type %q, %d-byte body; want the key, the claim-check type and a small body",
			sent.Headers[HeaderClaimCheck], sent.ContentType, len(sent.Body))
	}
	if _, ok := orig.Headers[HeaderClaimCheck]; ok {
		t.Fatal("WithClaimCheck changed the original message's headers")
	}
	if sent.MessageID != "m-1" || sent.Headers["x-acemq-attempt"] != int64(2) {
		t.Fatalf("WithClaimCheck lost properties: %+v", sent)
	}
	got, ok, err := ReadClaimCheck(sent)
	if err != nil || !ok || got != ref {
		t.Fatalf("ReadClaimCheck(WithClaimCheck(m, ref)) = %+v, %v, %v; want %+v", got, ok, err, ref)
	}
	back, err := RestoreClaimCheck(sent, got, payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Body, payload) || back.ContentType != "application/json" || back.MessageID != "m-1" {
		t.Fatalf("RestoreClaimCheck = %q type, %d bytes; want the original", back.ContentType, len(back.Body))
	}
	if _, ok := back.Headers[HeaderClaimCheck]; ok {
		t.Fatal("RestoreClaimCheck kept the claim-check header")
	}
	if _, ok := sent.Headers[HeaderClaimCheck]; !ok {
		t.Fatal("RestoreClaimCheck changed the arriving message's headers")
	}
	if _, err := RestoreClaimCheck(sent, got, payload[1:]); !isClaimCheckError(err) || !strings.Contains(err.Error(), ref.Key) {
		t.Fatalf("RestoreClaimCheck of a blob of the wrong size = %v, want a *ClaimCheckError naming the key", err)
	}
}

func isClaimCheckError(err error) bool {
	var ce *ClaimCheckError
	return errors.As(err, &ce)
}

func TestReadClaimCheck(t *testing.T) {
	key := sha([]byte("the payload"))
	body := `{"claim_check":"` + key + `","size":11,"content_type":"application/json"}`
	ref := ClaimCheck{Key: key, Size: 11, ContentType: "application/json"}
	cases := []struct {
		name    string
		m       Message
		want    ClaimCheck
		ok      bool
		wantErr bool
	}{
		{"a reference with the header and the content type reads", Message{ContentType: ClaimCheckContentType, Headers: Table{HeaderClaimCheck: key}, Body: []byte(body)}, ref, true, false},
		{"a reference with only the header reads", Message{ContentType: "application/json", Headers: Table{HeaderClaimCheck: key}, Body: []byte(body)}, ref, true, false},
		{"a reference with the header as bytes reads", Message{Headers: Table{HeaderClaimCheck: []byte(key)}, Body: []byte(body)}, ref, true, false},
		{"a reference with only the content type reads", Message{ContentType: ClaimCheckContentType, Body: []byte(body)}, ref, true, false},
		{"the content type is read with any case and parameters", Message{ContentType: "Application/VND.acemq.claim-check+json; charset=utf-8", Body: []byte(body)}, ref, true, false},
		{"unknown fields of a newer writer are ignored", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + key + `","size":11,"content_type":"application/json","algo":"x"}`)}, ref, true, false},
		{"a reference without a content type reads with none", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + key + `","size":11}`)}, ClaimCheck{Key: key, Size: 11}, true, false},
		{"an inline JSON body below the threshold is inline", Message{ContentType: "application/json", Body: []byte(`{"order":1}`)}, ClaimCheck{}, false, false},
		{"a pre-claim-check message with no header and a plain body is inline", Message{Body: []byte("plain text from 2019")}, ClaimCheck{}, false, false},
		{"a plain body that looks like a reference but is not framed as one is inline", Message{ContentType: "application/json", Body: []byte(body)}, ClaimCheck{}, false, false},
		{"a blank header is no header", Message{Headers: Table{HeaderClaimCheck: ""}, Body: []byte("x")}, ClaimCheck{}, false, false},
		{"a header that disagrees with the body is malformed", Message{ContentType: ClaimCheckContentType, Headers: Table{HeaderClaimCheck: sha([]byte("other"))}, Body: []byte(body)}, ClaimCheck{}, true, true},
		{"a header on a body that is not a reference is malformed", Message{Headers: Table{HeaderClaimCheck: key}, Body: []byte(`{"order":1}`)}, ClaimCheck{}, true, true},
		{"the claim-check type on a non-JSON body is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte("not json")}, ClaimCheck{}, true, true},
		{"an empty reference body is malformed", Message{ContentType: ClaimCheckContentType}, ClaimCheck{}, true, true},
		{"a key that is not sha256 is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"md5:abc","size":1}`)}, ClaimCheck{}, true, true},
		{"an upper-case key is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + strings.ToUpper(key) + `","size":11}`)}, ClaimCheck{}, true, true},
		{"a missing size is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + key + `"}`)}, ClaimCheck{}, true, true},
		{"a negative size is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + key + `","size":-1}`)}, ClaimCheck{}, true, true},
		{"a fractional size is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + key + `","size":1.5}`)}, ClaimCheck{}, true, true},
		{"a size as a string is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(`{"claim_check":"` + key + `","size":"11"}`)}, ClaimCheck{}, true, true},
		{"data after the reference is malformed", Message{ContentType: ClaimCheckContentType, Body: []byte(body + `{}`)}, ClaimCheck{}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := ReadClaimCheck(tc.m)
			if tc.wantErr {
				if !isClaimCheckError(err) || !ok {
					t.Fatalf("ReadClaimCheck = %+v, %v, %v; want ok and a *ClaimCheckError", got, ok, err)
				}
				if !strings.HasPrefix(err.Error(), "malformed claim-check reference: ") {
					t.Fatalf("error %q does not say what it is", err)
				}
				return
			}
			if err != nil || ok != tc.ok || got != tc.want {
				t.Fatalf("ReadClaimCheck = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}

func FuzzReadClaimCheck(f *testing.F) {
	key := sha([]byte("p"))
	f.Add([]byte(`{"claim_check":"`+key+`","size":1,"content_type":"application/json"}`), key, ClaimCheckContentType)
	f.Add([]byte(`{"claim_check":"`+key+`","size":0}`), "", ClaimCheckContentType)
	f.Add([]byte(`{"claim_check":"`+key+`","size":9223372036854775807,"x":[1,{"y":null}]}`), key, "")
	f.Add([]byte(`plain`), "", "text/plain")
	f.Add([]byte(`{"claim_check":null,"size":null}`), key, "")
	f.Fuzz(func(t *testing.T, body []byte, header, contentType string) {
		m := Message{ContentType: contentType, Body: body}
		if header != "" {
			m.Headers = Table{HeaderClaimCheck: header}
		}
		ref, ok, err := ReadClaimCheck(m)
		if err != nil {
			if !ok || !isClaimCheckError(err) {
				t.Fatalf("ReadClaimCheck error %v (ok %v) is not a *ClaimCheckError of a reference", err, ok)
			}
			return
		}
		if !ok {
			if ref != (ClaimCheck{}) {
				t.Fatalf("an inline message read a reference %+v", ref)
			}
			return
		}
		if !validClaimCheckKey(ref.Key) || ref.Size < 0 {
			t.Fatalf("accepted a reference with key %q and size %d", ref.Key, ref.Size)
		}
		// What we write, we read back the same.
		again, ok, err := ReadClaimCheck(WithClaimCheck(Message{}, ref))
		if err != nil || !ok || again != ref {
			t.Fatalf("our own reference %+v reads back as %+v, %v, %v", ref, again, ok, err)
		}
	})
}
