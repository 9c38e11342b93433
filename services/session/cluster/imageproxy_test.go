package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// importNode is a node's image service that takes imports, saying on got
// each message as it arrives; an archive starting with "bad" it refuses at
// once.
type importNode struct {
	imagev1.UnimplementedImageServiceServer
	got   chan *imagev1.ImportImageRequest
	ended chan error // how each import ended on the node
}

func (n *importNode) ImportImage(stream grpc.ClientStreamingServer[imagev1.ImportImageRequest, imagev1.ImportImageResponse]) error {
	var (
		ref  string
		data []byte
	)
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			n.ended <- err
			return err
		}
		n.got <- m
		if h := m.GetHeader(); h != nil {
			ref = h.GetRef()
			continue
		}
		data = append(data, m.GetChunk()...)
		if bytes.HasPrefix(data, []byte("bad")) {
			n.ended <- nil
			return status.Error(codes.InvalidArgument, "import image: not an image archive")
		}
	}
	n.ended <- nil
	return stream.SendAndClose(&imagev1.ImportImageResponse{Images: []*imagev1.Image{{Ref: ref, Size: int64(len(data))}}})
}

// oneNodeImages reaches every node's image service at one connection.
type oneNodeImages struct{ c imagev1.ImageServiceClient }

func (o oneNodeImages) Image(string) (imagev1.ImageServiceClient, error) { return o.c, nil }

func serveBuf(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///buf", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// An import through the proxy goes to the node its header names, each
// chunk passed on before the next is read; the node's refusal reaches the
// caller, a caller that goes away ends the node's import, and an import
// that names no node, an unknown one or a dead one is refused.
func TestImageProxyImport(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addNode(t, reg, "a", 4, nil)
	if err := reg.Register(ctx, NodeInfo{ID: "dead", Address: "127.0.0.1:1", Capacity: placement.Capacity{Sessions: 2}}); err != nil {
		t.Fatal(err)
	}
	node := &importNode{got: make(chan *imagev1.ImportImageRequest, 16), ended: make(chan error, 4)}
	nodeConn := serveBuf(t, func(s *grpc.Server) { imagev1.RegisterImageServiceServer(s, node) })
	proxy := NewImageProxy(NewNodeService(reg, oneNodeImages{imagev1.NewImageServiceClient(nodeConn)}, nil))
	client := imagev1.NewImageServiceClient(serveBuf(t, func(s *grpc.Server) { proxy.Register(s) }))

	header := func(ref, nodeID string) *imagev1.ImportImageRequest {
		return &imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Header{Header: &imagev1.ImportImageHeader{Ref: ref, NodeId: nodeID}}}
	}
	chunk := func(b string) *imagev1.ImportImageRequest {
		return &imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Chunk{Chunk: []byte(b)}}
	}
	arrived := func() *imagev1.ImportImageRequest {
		t.Helper()
		select {
		case m := <-node.got:
			return m
		case <-ctx.Done():
			t.Fatal("the node got nothing")
			return nil
		}
	}

	t.Run("streamed on to the node named", func(t *testing.T) {
		stream, err := client.ImportImage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(header("team/air:v1", "a")); err != nil {
			t.Fatal(err)
		}
		if h := arrived().GetHeader(); h.GetRef() != "team/air:v1" || h.GetNodeId() != "" {
			t.Fatalf("the node's header: %v", h)
		}
		// The node has each chunk while the caller still holds the next.
		for i := range 3 {
			part := fmt.Sprintf("part %d;", i)
			if err := stream.Send(chunk(part)); err != nil {
				t.Fatal(err)
			}
			if got := string(arrived().GetChunk()); got != part {
				t.Fatalf("chunk %d on the node: %q", i, got)
			}
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetImages()) != 1 || resp.GetImages()[0].GetSize() != int64(len("part 0;part 1;part 2;")) {
			t.Fatalf("answer %v", resp)
		}
		if err := <-node.ended; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the node's refusal", func(t *testing.T) {
		stream, err := client.ImportImage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(header("", "a"))
		_ = stream.Send(chunk("bad archive"))
		arrived()
		arrived()
		<-node.ended
		// The caller, still sending, learns why once it closes.
		for range 100 {
			if stream.Send(chunk("more")) != nil {
				break
			}
		}
		if _, err := stream.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("import of a bad archive: %v, want InvalidArgument", err)
		}
	})

	t.Run("a caller that goes away", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		stream, err := client.ImportImage(cctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(header("", "a"))
		_ = stream.Send(chunk("half"))
		arrived()
		arrived()
		ccancel()
		select {
		case err := <-node.ended:
			if status.Code(err) != codes.Canceled {
				t.Fatalf("the node's import ended with %v, want Canceled", err)
			}
		case <-ctx.Done():
			t.Fatal("the node's import went on after its caller left")
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			first *imagev1.ImportImageRequest
			want  codes.Code
			says  string
		}{
			{"no node", header("", ""), codes.FailedPrecondition, "node_id (CLI -node)"},
			{"unknown node", header("", "zz"), codes.NotFound, "zz"},
			{"dead node", header("", "dead"), codes.Unavailable, "down"},
			{"no header", chunk("data"), codes.InvalidArgument, "header"},
		} {
			stream, err := client.ImportImage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = stream.Send(tc.first)
			_, err = stream.CloseAndRecv()
			if st := status.Convert(err); st.Code() != tc.want || !bytes.Contains([]byte(st.Message()), []byte(tc.says)) {
				t.Errorf("%s: %v, want %s saying %q", tc.name, err, tc.want, tc.says)
			}
		}
		select {
		case m := <-node.got:
			t.Fatalf("the node got %v of a refused import", m)
		default:
		}
	})
}
