// Command nohandshake is a test binary that starts and never prints a
// go-plugin handshake line, like a plugin stuck before serving.
package main

import "time"

func main() {
	for {
		time.Sleep(time.Hour)
	}
}
