package vmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cpuUseEnv, set on the guest kernel's command line (K8SGUIDE_VM_KERNEL_ARGS=k8sguide_vm_cpu=1), makes init
// report at the end where the guest's CPU time went, by program: what to read before making a VM test faster.
const cpuUseEnv = "k8sguide_vm_cpu"

// cpuUse samples every process's CPU time in /proc while the tests run.
type cpuUse struct {
	stop chan struct{}
	done chan struct{}
	// seen is each process's CPU time at the last reading (by pid and start time: a reused pid is a new
	// process).
	seen map[procKey]uint64
	// by is the CPU time read so far by program. A process's time goes to the program it runs at the reading
	// (`ip netns exec NODE k8sguide …` becomes k8sguide).
	by map[string]uint64
}

type procKey struct {
	pid   int
	start uint64
}

// cpuSample is how often /proc is read: a process that lives less than this is counted for what it had used at
// the last reading (often nothing): the report's "not seen" is what the samples missed.
const cpuSample = 250 * time.Millisecond

func startCPUUse() *cpuUse {
	u := &cpuUse{stop: make(chan struct{}), done: make(chan struct{}), seen: map[procKey]uint64{}, by: map[string]uint64{}}
	go func() {
		defer close(u.done)
		for {
			u.sample()
			select {
			case <-u.stop:
				u.sample()
				return
			case <-time.After(cpuSample):
			}
		}
	}()
	return u
}

func (u *cpuUse) sample() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// After the command's ")" : state ppid ... utime(14) stime(15) ... starttime(22), counted from 1.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 20 {
			continue
		}
		utime, _ := strconv.ParseUint(f[11], 10, 64)
		stime, _ := strconv.ParseUint(f[12], 10, 64)
		start, _ := strconv.ParseUint(f[19], 10, 64)
		k := procKey{pid, start}
		if d := utime + stime - u.seen[k]; d > 0 {
			u.by[programOf(pid, s[strings.IndexByte(s, '(')+1:i])] += d
		}
		u.seen[k] = utime + stime
	}
}

// programOf names a process for the report: k8sguide's programs by their subcommand words, others by name.
func programOf(pid int, comm string) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(raw) == 0 {
		return comm
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	name := filepath.Base(argv[0])
	if !strings.HasPrefix(name, "k8sguide") && name != "init" {
		return name
	}
	words := []string{name}
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") || len(words) == 3 {
			break
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// report prints the guest's CPU time by program, largest first, beside the whole guest's from /proc/stat.
func (u *cpuUse) report() {
	close(u.stop)
	<-u.done
	hz := 100.0 // USER_HZ
	by := u.by
	var counted uint64
	for _, t := range by {
		counted += t
	}
	var total uint64
	if stat, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(stat), "\n", 2)[0])
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseUint(v, 10, 64)
			total += n
		}
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]] > by[names[j]] })
	fmt.Printf("vmtest: the guest's CPU time, %.1f s in all (/proc/stat), by program:\n", float64(total)/hz)
	for _, n := range names {
		if by[n] >= 10 {
			fmt.Printf("vmtest: %8.1f s  %s\n", float64(by[n])/hz, n)
		}
	}
	if total > counted {
		fmt.Printf("vmtest: %8.1f s  not seen by a sample (processes shorter than %v, the kernel's own work)\n", float64(total-counted)/hz, cpuSample)
	}
}
