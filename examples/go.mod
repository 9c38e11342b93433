module github.com/deskgrid/deskgrid/examples

go 1.26.0

require github.com/deskgrid/deskgrid/sdk v0.0.0

require (
	github.com/deskgrid/deskgrid/proto v0.0.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20261005182115-fad411399dd8 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261005182115-fad411399dd8 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/deskgrid/deskgrid/proto => ../proto
	github.com/deskgrid/deskgrid/sdk => ../sdk
)
