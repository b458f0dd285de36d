package kind

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/k8sguide/k8sguide/lab/doctor"
)

// engineInfo is what `docker info` says of the engine that matters to a lab.
type engineInfo struct {
	ServerVersion   string
	OperatingSystem string
	KernelVersion   string
	CgroupVersion   string
	MemTotal        int64
	NCPU            int
}

// minEngineMemory is the memory below which doctor warns. kind's docs ask 6 GB of Docker Desktop to build a node
// image; what a 3-node lab needs to run is less, and not measured here: the warning is a hint, not a verdict.
const minEngineMemory = 4 << 30

// Doctor checks what a kind lab needs of this host: the docker command, an engine that answers, its cgroup
// version and memory, and the node image (without it, kind pulls one from the network).
func Doctor(ctx context.Context) []doctor.Check {
	const f = ProviderName
	tool := doctor.Tool(f, "docker", "docker-ce-cli, or Docker Desktop")
	checks := []doctor.Check{tool}
	if tool.Status != doctor.Pass {
		return checks
	}
	engine := doctor.Check{For: f, Name: "Docker engine"}
	if err := EngineAnswers(ctx); err != nil {
		engine.Status, engine.Found = doctor.Fail, err.Error()
		engine.Fix = "start it (Docker Desktop, or systemctl start docker), or point DOCKER_HOST at one; --provider netns needs no Docker"
		return append(checks, engine)
	}
	info, err := readEngineInfo(ctx)
	if err != nil {
		engine.Status, engine.Found = doctor.Fail, err.Error()
		return append(checks, engine)
	}
	engine.Status = doctor.Pass
	engine.Found = fmt.Sprintf("Docker %s on %s, kernel %s, %d CPUs", info.ServerVersion, info.OperatingSystem, info.KernelVersion, info.NCPU)
	checks = append(checks, engine)

	cg := doctor.Check{For: f, Name: "engine's cgroups", Status: doctor.Pass, Found: "cgroup v" + info.CgroupVersion}
	if info.CgroupVersion == "1" {
		cg.Status = doctor.Warn
		cg.Found = "cgroup v1: kubelet refuses it from Kubernetes 1.35, so up turns its failCgroupV1 off"
		cg.Fix = "a host on cgroup v2 (Docker Desktop 4.x is; on Linux boot with systemd.unified_cgroup_hierarchy=1)"
	}
	checks = append(checks, cg)

	mem := doctor.Check{For: f, Name: "engine's memory", Status: doctor.Pass, Found: fmt.Sprintf("%.1f GB", float64(info.MemTotal)/(1<<30))}
	if info.MemTotal > 0 && info.MemTotal < minEngineMemory {
		mem.Status = doctor.Warn
		mem.Fix = "give the engine 4 GB or more (Docker Desktop: Settings → Resources → Memory)"
	}
	checks = append(checks, mem)

	image, _, _, err := NodeImage("", "")
	img := doctor.Check{For: f, Name: "node image"}
	switch has, herr := NewDockerRuntime().HasImage(ctx, image); {
	case err != nil:
		img.Status, img.Found = doctor.Fail, err.Error()
	case herr != nil:
		img.Status, img.Found = doctor.Warn, "not checked: "+herr.Error()
	case has:
		img.Status, img.Found = doctor.Pass, image
	default:
		img.Status, img.Found = doctor.Warn, image+" is not in the engine: up pulls it from the network (a registry must answer)"
		img.Fix = "docker pull it before class, or build one offline (make kind-image)"
	}
	return append(checks, img)
}

func readEngineInfo(ctx context.Context) (engineInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{json .}}").Output()
	if err != nil {
		return engineInfo{}, fmt.Errorf("docker info: %w", err)
	}
	var info engineInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return engineInfo{}, fmt.Errorf("docker info: %w", err)
	}
	info.OperatingSystem = strings.TrimSpace(info.OperatingSystem)
	return info, nil
}
