// gpuattr-deviceplugin is a device plugin (k8s.io/kubelet deviceplugin/v1beta1) that advertises
// the device IDs NVIDIA's plugin would: whole GPUs (GPU-<uuid>), time-slicing replicas
// (GPU-<uuid>::<n>, under nvidia.com/gpu or a renamed nvidia.com/gpu.shared) and MIG devices
// (MIG-<uuid> under nvidia.com/mig-<profile>). There is no hardware: Allocate answers the
// environment NVIDIA's plugin would set and nothing else.
//
// One gRPC server (and socket) per resource, each registered with the kubelet. Like a real
// plugin it watches the kubelet's registration socket: when the kubelet restarts (the socket is
// made anew, and the kubelet removes every plugin socket) it serves and registers again.
//
// Usage: gpuattr-deviceplugin <config.json>
//
//	{"resources": [{"name": "nvidia.com/gpu", "devices": [{"id": "GPU-...", "numa": 0}]}]}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type deviceConfig struct {
	ID   string `json:"id"`
	NUMA *int64 `json:"numa"`
}

type resourceConfig struct {
	Name    string         `json:"name"`
	Devices []deviceConfig `json:"devices"`
}

type config struct {
	Resources []resourceConfig `json:"resources"`
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	devices  []*pluginapi.Device
	socket   string
	server   *grpc.Server
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done() // the device list never changes during a plugin's life
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		uuids := []string{}
		for _, id := range c.DevicesIds {
			uuids = append(uuids, strings.SplitN(id, "::", 2)[0])
		}
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(uuids, ",")},
		})
	}
	return out, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *plugin) serve() error {
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.socket, err)
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(l) }()
	return nil
}

func (p *plugin) register() error {
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.resource,
		Options:      &pluginapi.DevicePluginOptions{},
	}, grpc.WaitForReady(true))
	return err
}

func (p *plugin) stop() {
	if p.server != nil {
		p.server.Stop()
		p.server = nil
	}
	_ = os.Remove(p.socket)
}

func load(path string) ([]*plugin, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var plugins []*plugin
	for _, r := range cfg.Resources {
		p := &plugin{
			resource: r.Name,
			socket: filepath.Join(pluginapi.DevicePluginPath,
				"gpuattr-"+strings.NewReplacer("/", "_", ".", "_").Replace(r.Name)+".sock"),
		}
		for _, d := range r.Devices {
			dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
			if d.NUMA != nil {
				dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: *d.NUMA}}}
			}
			p.devices = append(p.devices, dev)
		}
		plugins = append(plugins, p)
	}
	return plugins, nil
}

// kubeletIdentity names the registration socket file: a new one means a new kubelet. The inode
// alone is not enough (a file made right after another is removed may get its number back).
func kubeletIdentity() string {
	var st syscall.Stat_t
	if err := syscall.Stat(pluginapi.KubeletSocket, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d@%d.%09d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}

// start serves and registers every resource; false if one failed (tried again on the next tick).
func start(plugins []*plugin) bool {
	for _, p := range plugins {
		p.stop()
		if err := p.serve(); err != nil {
			log.Printf("%s: %v", p.resource, err)
			return false
		}
		if err := p.register(); err != nil {
			log.Printf("%s: register: %v", p.resource, err)
			return false
		}
		log.Printf("registered %s with %d devices", p.resource, len(p.devices))
	}
	return true
}

func main() {
	if len(os.Args) != 2 {
		log.Fatalf("usage: %s <config.json>", os.Args[0])
	}
	plugins, err := load(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var kubelet string
	for {
		select {
		case <-stop:
			for _, p := range plugins {
				p.stop()
			}
			return
		case <-tick.C:
			if id := kubeletIdentity(); id != "" && id != kubelet {
				log.Printf("kubelet registration socket %s: registering", id)
				if start(plugins) {
					kubelet = id
				}
			}
		}
	}
}
