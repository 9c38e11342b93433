module github.com/deskgrid/deskgrid/services/sandbox

go 1.26.0

require (
	github.com/aymanbagabas/go-udiff v0.4.1
	github.com/containerd/cgroups/v3 v3.1.3
	github.com/deskgrid/deskgrid/proto v0.0.0-00010101000000-000000000000
	github.com/klauspost/compress v1.18.0
	github.com/opencontainers/runtime-spec v1.3.0
	golang.org/x/net v0.60.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/coreos/go-systemd/v22 v22.5.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/godbus/dbus/v5 v5.1.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

replace (
	github.com/deskgrid/deskgrid/proto => ../../proto
	github.com/deskgrid/deskgrid/services/platform => ../platform
)
