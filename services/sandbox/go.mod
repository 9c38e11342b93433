module github.com/deskgrid/deskgrid/services/sandbox

go 1.26.0

require (
	github.com/aymanbagabas/go-udiff v0.4.1
	github.com/containerd/cgroups/v3 v3.1.3
	github.com/deskgrid/deskgrid/proto v0.0.0
	github.com/deskgrid/deskgrid/services/display v0.0.0
	github.com/google/go-containerregistry v0.20.6
	github.com/klauspost/compress v1.18.0
	github.com/opencontainers/runtime-spec v1.3.0
	go.yaml.in/yaml/v4 v4.0.0-rc.2
	golang.org/x/net v0.60.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/containerd/stargz-snapshotter/estargz v0.16.3 // indirect
	github.com/coreos/go-systemd/v22 v22.5.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/godbus/dbus/v5 v5.1.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/jezek/xgb v1.1.1 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vbatts/tar-split v0.12.1 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
)

replace (
	github.com/deskgrid/deskgrid/proto => ../../proto
	github.com/deskgrid/deskgrid/services/display => ../display
	github.com/deskgrid/deskgrid/services/platform => ../platform
)
