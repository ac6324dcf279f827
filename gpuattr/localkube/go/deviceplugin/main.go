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
// A device's health can change while it runs, as a GPU fails and recovers: the optional
// health file ({"GPU-...": "Unhealthy"}; a device not named, or no file, is Healthy) is read
// every 100 ms, and on a change each resource whose devices changed sends its whole list again,
// health set, on every open ListAndWatch stream. Replace the file atomically (rename).
//
// Usage: gpuattr-deviceplugin <config.json>
//
//	{"resources": [{"name": "nvidia.com/gpu", "devices": [{"id": "GPU-...", "numa": 0}]}],
//	 "health_file": "/path/to/health.json"}
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
	"sync"
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
	Resources  []resourceConfig `json:"resources"`
	HealthFile string           `json:"health_file"`
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	socket   string
	server   *grpc.Server

	mu sync.Mutex
	// devices is the list last sent; never modified once built (a stream may be marshalling it)
	devices []*pluginapi.Device
	// streams holds one channel per open ListAndWatch stream: the latest list not yet sent
	streams map[chan []*pluginapi.Device]struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	updates := make(chan []*pluginapi.Device, 1)
	p.mu.Lock()
	updates <- p.devices
	p.streams[updates] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, updates)
		p.mu.Unlock()
	}()
	for {
		select {
		case <-s.Context().Done():
			return nil
		case devices := <-updates:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
				return err
			}
		}
	}
}

// setHealth builds the device list anew with health (a device not in it is Healthy) and, if any
// device's health changed, hands it to every open stream: each stream's channel holds only the
// latest list, so a slow stream skips lists it has not sent yet, never the last one.
func (p *plugin) setHealth(health map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := false
	devices := make([]*pluginapi.Device, 0, len(p.devices))
	for _, d := range p.devices {
		want := pluginapi.Healthy
		if h, ok := health[d.ID]; ok {
			want = h
		}
		changed = changed || want != d.Health
		devices = append(devices, &pluginapi.Device{ID: d.ID, Health: want, Topology: d.Topology})
	}
	if !changed {
		return
	}
	p.devices = devices
	for updates := range p.streams {
		select {
		case <-updates: // not sent yet: replaced by this newer list
		default:
		}
		updates <- devices // the only sender, under p.mu: never blocks
	}
	log.Printf("%s: device health now %s", p.resource, describe(devices))
}

func describe(devices []*pluginapi.Device) string {
	parts := make([]string, 0, len(devices))
	for _, d := range devices {
		parts = append(parts, d.ID+"="+d.Health)
	}
	return strings.Join(parts, " ")
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

func load(path string) ([]*plugin, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	var plugins []*plugin
	for _, r := range cfg.Resources {
		p := &plugin{
			resource: r.Name,
			socket: filepath.Join(pluginapi.DevicePluginPath,
				"gpuattr-"+strings.NewReplacer("/", "_", ".", "_").Replace(r.Name)+".sock"),
			streams: map[chan []*pluginapi.Device]struct{}{},
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
	return plugins, cfg.HealthFile, nil
}

// healthWatch reads the health file when its content changes.
type healthWatch struct {
	path string
	last []byte // the content last read; nil before the first read
}

// changed is the file's health map when its content differs from the last read (a missing
// file is an empty map: every device Healthy); false if unchanged or not valid (said once).
func (w *healthWatch) changed() (map[string]string, bool) {
	raw, err := os.ReadFile(w.path)
	if os.IsNotExist(err) {
		raw, err = []byte("{}"), nil
	}
	if err != nil {
		log.Printf("health file %s: %v", w.path, err)
		return nil, false
	}
	if w.last != nil && string(raw) == string(w.last) {
		return nil, false
	}
	w.last = raw
	health := map[string]string{}
	if err := json.Unmarshal(raw, &health); err != nil {
		log.Printf("health file %s: %v", w.path, err)
		return nil, false
	}
	for id, h := range health {
		if h != pluginapi.Healthy && h != pluginapi.Unhealthy {
			log.Printf("health file %s: %s: %q is neither %s nor %s", w.path, id, h,
				pluginapi.Healthy, pluginapi.Unhealthy)
			return nil, false
		}
	}
	return health, true
}

func (w *healthWatch) apply(plugins []*plugin) {
	if w.path == "" {
		return
	}
	if health, ok := w.changed(); ok {
		for _, p := range plugins {
			p.setHealth(health)
		}
	}
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
	plugins, healthFile, err := load(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	health := &healthWatch{path: healthFile}
	health.apply(plugins) // before the first ListAndWatch
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
			health.apply(plugins)
			if id := kubeletIdentity(); id != "" && id != kubelet {
				log.Printf("kubelet registration socket %s: registering", id)
				if start(plugins) {
					kubelet = id
				}
			}
		}
	}
}
