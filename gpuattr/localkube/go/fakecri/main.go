// gpuattr-fakecri serves the in-memory fake container runtime that ships with Kubernetes
// (k8s.io/cri-client/pkg/fake) on a unix socket, for a real kubelet without containers.
//
// Two changes to the fake, both things a real runtime does: pulled images have a size
// (a zero size makes the kubelet fail with ImageInspectError), and every container answers
// the log path the kubelet asked for, created empty (without one, the kubelet's log cleanup
// globs "*" in its working directory and deletes what it finds).
//
// A control socket (HTTP over a second unix socket) lets a test do what a workload would:
//
//	POST /exit?namespace=N&pod=P&container=C&code=0   the running container exits with code
//	POST /sandbox-notready?namespace=N&pod=P          the pod's sandbox dies (the kubelet
//	                                                  makes a new one and restarts the pod)
//	GET  /containers                                  every container, as JSON
//
// Usage: gpuattr-fakecri <runtime socket> <control socket>
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"

	"google.golang.org/grpc"
)

const (
	imageSize      = 64 << 20
	podNameLabel   = "io.kubernetes.pod.name"
	podNsLabel     = "io.kubernetes.pod.namespace"
	containerLabel = "io.kubernetes.container.name"
)

// runtime is the upstream fake with the two changes above.
type runtime struct {
	*fake.RemoteRuntime
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath())
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err == nil {
		if f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	svc := r.RuntimeService
	svc.Lock()
	if c, ok := svc.Containers[resp.ContainerId]; ok {
		c.LogPath = logPath
	}
	svc.Unlock()
	return resp, nil
}

type containerView struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Attempt   uint32 `json:"attempt"`
	State     string `json:"state"`
	ExitCode  int32  `json:"exit_code"`
	Sandbox   string `json:"sandbox"`
}

type control struct {
	svc *fake.RemoteRuntime
}

func (c *control) containers(w http.ResponseWriter, _ *http.Request) {
	svc := c.svc.RuntimeService
	svc.Lock()
	out := []containerView{}
	for _, ctr := range svc.Containers {
		out = append(out, containerView{
			ID: ctr.Id, Namespace: ctr.Labels[podNsLabel], Pod: ctr.Labels[podNameLabel],
			Container: ctr.Labels[containerLabel], Attempt: ctr.Metadata.GetAttempt(),
			State: ctr.State.String(), ExitCode: ctr.ExitCode, Sandbox: ctr.SandboxID,
		})
	}
	svc.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (c *control) exit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	code, err := strconv.Atoi(q.Get("code"))
	if err != nil {
		http.Error(w, "code: "+err.Error(), http.StatusBadRequest)
		return
	}
	svc := c.svc.RuntimeService
	svc.Lock()
	n := 0
	for _, ctr := range svc.Containers {
		if ctr.Labels[podNsLabel] == q.Get("namespace") && ctr.Labels[podNameLabel] == q.Get("pod") &&
			ctr.Labels[containerLabel] == q.Get("container") &&
			ctr.State == kubeapi.ContainerState_CONTAINER_RUNNING {
			ctr.State = kubeapi.ContainerState_CONTAINER_EXITED
			ctr.ExitCode = int32(code)
			ctr.FinishedAt = time.Now().UnixNano()
			ctr.Reason = "Completed"
			if code != 0 {
				ctr.Reason = "Error"
			}
			n++
		}
	}
	svc.Unlock()
	if n == 0 {
		http.Error(w, "no running container matches", http.StatusNotFound)
		return
	}
	fmt.Fprintf(w, "%d\n", n)
}

func (c *control) sandboxNotReady(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	svc := c.svc.RuntimeService
	svc.Lock()
	n := 0
	for _, sb := range svc.Sandboxes {
		md := sb.GetMetadata()
		if md.GetNamespace() == q.Get("namespace") && md.GetName() == q.Get("pod") &&
			sb.State == kubeapi.PodSandboxState_SANDBOX_READY {
			sb.State = kubeapi.PodSandboxState_SANDBOX_NOTREADY
			n++
		}
	}
	svc.Unlock()
	if n == 0 {
		http.Error(w, "no ready sandbox matches", http.StatusNotFound)
		return
	}
	fmt.Fprintf(w, "%d\n", n)
}

func post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		h(w, r)
	}
}

// forget trims the fake's record of every call it served, which grows without bound.
func forget(f *fake.RemoteRuntime) {
	for range time.Tick(30 * time.Second) {
		f.RuntimeService.Lock()
		f.RuntimeService.Called = nil
		f.RuntimeService.Unlock()
		f.ImageService.Lock()
		f.ImageService.Called = nil
		f.ImageService.Unlock()
	}
}

func listen(path string) net.Listener {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatalf("listen on %s: %v", path, err)
	}
	return l
}

func main() {
	if len(os.Args) != 3 {
		log.Fatalf("usage: %s <runtime socket> <control socket>", os.Args[0])
	}
	f := fake.NewFakeRemoteRuntime()
	f.ImageService.SetFakeImageSize(imageSize)
	f.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	go forget(f)

	server := grpc.NewServer()
	r := &runtime{f}
	kubeapi.RegisterRuntimeServiceServer(server, r)
	kubeapi.RegisterImageServiceServer(server, r)
	go func() {
		if err := server.Serve(listen(os.Args[1])); err != nil {
			log.Fatalf("runtime service: %v", err)
		}
	}()

	c := &control{f}
	mux := http.NewServeMux()
	mux.HandleFunc("/containers", c.containers)
	mux.HandleFunc("/exit", post(c.exit))
	mux.HandleFunc("/sandbox-notready", post(c.sandboxNotReady))
	go func() {
		if err := http.Serve(listen(os.Args[2]), mux); err != nil {
			log.Fatalf("control: %v", err)
		}
	}()
	log.Printf("fake runtime on %s, control on %s", os.Args[1], os.Args[2])

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	server.Stop()
}
