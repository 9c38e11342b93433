module github.com/deskgrid/deskgrid/cmd/deskgrid

go 1.26.0

require (
	github.com/deskgrid/deskgrid/gateway v0.0.0
	github.com/deskgrid/deskgrid/proto v0.0.0
	github.com/deskgrid/deskgrid/services/agent v0.0.0
	github.com/deskgrid/deskgrid/services/display v0.0.0
	github.com/deskgrid/deskgrid/services/history v0.0.0
	github.com/deskgrid/deskgrid/services/platform v0.0.0
	github.com/deskgrid/deskgrid/services/sandbox v0.0.0
	github.com/deskgrid/deskgrid/services/session v0.0.0
)

replace (
	github.com/deskgrid/deskgrid/gateway => ../../gateway
	github.com/deskgrid/deskgrid/proto => ../../proto
	github.com/deskgrid/deskgrid/services/agent => ../../services/agent
	github.com/deskgrid/deskgrid/services/display => ../../services/display
	github.com/deskgrid/deskgrid/services/history => ../../services/history
	github.com/deskgrid/deskgrid/services/platform => ../../services/platform
	github.com/deskgrid/deskgrid/services/sandbox => ../../services/sandbox
	github.com/deskgrid/deskgrid/services/session => ../../services/session
)
