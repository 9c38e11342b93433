module github.com/deskgrid/deskgrid/gateway

go 1.26.0

require (
	github.com/deskgrid/deskgrid/proto v0.0.0
	github.com/deskgrid/deskgrid/services/platform v0.0.0
)

replace (
	github.com/deskgrid/deskgrid/proto => ../proto
	github.com/deskgrid/deskgrid/services/platform => ../services/platform
)
