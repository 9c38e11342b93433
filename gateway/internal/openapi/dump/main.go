// Command dump writes the OpenAPI document the gateway serves to standard
// output, for linters and client generators that read a file.
package main

import (
	"fmt"
	"os"

	"github.com/deskgrid/deskgrid/gateway/internal/openapi"
)

func main() {
	if _, err := os.Stdout.Write(openapi.Document); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
