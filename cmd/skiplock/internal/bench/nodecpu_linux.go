package bench

// CPU accounting of the Citus cluster's nodes for CN (citus_cn.go), when they run on this
// machine: a node's CPU is its postmaster's and every backend's, read from /proc.

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

// postmasterPID reads the postmaster's process id from dir's postmaster.pid (0 when
// it cannot be read: the node runs elsewhere, or this user may not read it).
func postmasterPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// procStat returns a process's parent, its own CPU time and its reaped children's,
// in nanoseconds, from /proc/PID/stat.
func procStat(pid string) (ppid int, own, children int64, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	const ns = int64(1e9 / clockTicks)
	// Fields 4 (ppid), 14 (utime), 15 (stime), 16 (cutime), 17 (cstime).
	return int(num(1)), (num(11) + num(12)) * ns, (num(13) + num(14)) * ns, true
}

// treeCPU is the CPU time in nanoseconds of the postmaster pid and its children, live
// and reaped (-1 when unknown). A backend that exits between two samples moves from
// the live sum into the postmaster's reaped children's time: counted once either way.
func treeCPU(pid int) int64 {
	if pid <= 0 {
		return -1
	}
	_, own, reaped, ok := procStat(strconv.Itoa(pid))
	if !ok {
		return -1
	}
	total := own + reaped
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	for _, d := range ents {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		if ppid, own, reaped, ok := procStat(d.Name()); ok && ppid == pid {
			total += own + reaped
		}
	}
	return total
}

// selfCPU is this process's CPU time in nanoseconds (-1 when unknown).
func selfCPU() int64 {
	_, own, _, ok := procStat("self")
	if !ok {
		return -1
	}
	return own
}

// numCPU is the cores a node is modelled with: this machine's.
func numCPU() int { return runtime.NumCPU() }
