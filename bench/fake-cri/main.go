// A stand-in CRI runtime for the policy scale benchmark (plexus-bench
// --scale --policies, bench/src/scale_policy.rs): multi-networkpolicy-iptables
// needs a CRI socket to start, and asks it (ContainerStatus, verbose) for the
// pid whose /proc/<pid>/ns/net is a pod's network namespace. The simulated
// nodes have no runtime: the benchmark names a process in each pod's
// namespace in the pod's container ID, `fake://pid-<N>`, and this answers
// that pid. Nothing else is served. Built by bench/fake-cri/build with
// multi-networkpolicy-iptables' own vendor/ (grpc, cri-api); no code of it is
// in plexus.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type runtime struct {
	pb.UnimplementedRuntimeServiceServer
}

func (*runtime) Version(context.Context, *pb.VersionRequest) (*pb.VersionResponse, error) {
	return &pb.VersionResponse{Version: "0.1.0", RuntimeName: "plexus-bench-fake-cri",
		RuntimeVersion: "0", RuntimeApiVersion: "v1"}, nil
}

func (*runtime) ContainerStatus(_ context.Context, r *pb.ContainerStatusRequest) (*pb.ContainerStatusResponse, error) {
	pid, err := strconv.Atoi(strings.TrimPrefix(r.ContainerId, "pid-"))
	if err != nil {
		return nil, fmt.Errorf("container %q: not pid-<N>", r.ContainerId)
	}
	info, _ := json.Marshal(map[string]int{"pid": pid})
	return &pb.ContainerStatusResponse{
		Status: &pb.ContainerStatus{Id: r.ContainerId, State: pb.ContainerState_CONTAINER_RUNNING},
		Info:   map[string]string{"info": string(info)},
	}, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fake-cri SOCKET")
		os.Exit(2)
	}
	_ = os.Remove(os.Args[1])
	listener, err := net.Listen("unix", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server := grpc.NewServer()
	pb.RegisterRuntimeServiceServer(server, &runtime{})
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
