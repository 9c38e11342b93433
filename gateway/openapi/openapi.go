// Package openapi holds the OpenAPI document generated from the protos.
package openapi

import _ "embed"

// Document is the merged OpenAPI (Swagger 2.0) document of the public API.
//
//go:embed deskgrid.swagger.json
var Document []byte
