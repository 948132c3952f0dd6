package sqlite

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }
