package memory

// CorruptBlob flips the first byte of the content s holds under key, as a
// damaged disk would, for the conformance suite.
func CorruptBlob(s *Blobs, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.blobs[key]; ok && len(b.content) > 0 {
		b.content[0] ^= 0x01
	}
}
