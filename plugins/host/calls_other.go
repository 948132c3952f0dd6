//go:build !unix

package host

import "os"

// callSocketPair: without Unix sockets, calls travel over gRPC.
func callSocketPair() (host, child *os.File, err error) { return nil, nil, nil }

func callSocketReady(*os.File) bool { return false }
