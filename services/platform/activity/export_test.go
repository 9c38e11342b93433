package activity

import "google.golang.org/grpc"

func UnaryForTest(t *Tracker) grpc.UnaryServerInterceptor   { return t.unary }
func StreamForTest(t *Tracker) grpc.StreamServerInterceptor { return t.stream }
