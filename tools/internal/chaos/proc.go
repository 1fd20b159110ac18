package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the harness started.
type proc struct {
	name  string
	cmd   *exec.Cmd
	lines chan string   // stdout protocol lines; the oldest are dropped when full
	done  chan struct{} // closed when the process has exited
	err   error         // exit status, valid after done
}

// procs tracks every child so the harness can kill what is left on any exit path.
type procs struct {
	mu     sync.Mutex
	all    map[*proc]struct{}
	cmd    func(spec []byte) *exec.Cmd
	logDir string
}

// spawn starts a child running spec. Its stderr goes to <logDir>/<id>.log.
func (ps *procs) spawn(spec childSpec) (*proc, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding child spec: %w", err)
	}
	return ps.start(spec.ID, ps.cmd(b))
}

// start starts cmd as the child named id (the harness's own binary, or a worker in
// another language: lang.go). Its stderr goes to <logDir>/<id>.log.
func (ps *procs) start(id string, cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(ps.logDir, id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening child log: %w", err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting child %s: %w", id, err)
	}
	p := &proc{name: id, cmd: cmd, lines: make(chan string, 256), done: make(chan struct{})}
	ps.mu.Lock()
	ps.all[p] = struct{}{}
	ps.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			for {
				select {
				case p.lines <- sc.Text():
				default:
					select { // full: drop the oldest line, keep the newest
					case <-p.lines:
					default:
					}
					continue
				}
				break
			}
		}
		p.err = cmd.Wait()
		close(p.done)
		ps.mu.Lock()
		delete(ps.all, p)
		ps.mu.Unlock()
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s with %s: %w", p.name, sig, err)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// terminate asks the process to stop (SIGCONT in case it is stopped, then SIGTERM)
// and kills it if it has not exited within grace.
func (p *proc) terminate(grace time.Duration) {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// drainLines discards the protocol lines printed so far.
func (p *proc) drainLines() {
	for {
		select {
		case <-p.lines:
		default:
			return
		}
	}
}

// waitLine waits for a stdout line starting with prefix and returns it.
func (p *proc) waitLine(ctx context.Context, prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-p.done:
			return "", fmt.Errorf("%s exited (%v) before printing %q", p.name, p.err, prefix)
		case <-t.C:
			return "", fmt.Errorf("%s printed no %q within %s", p.name, prefix, timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// killAll kills every child still running (cleanup on any exit path).
func (ps *procs) killAll() {
	ps.mu.Lock()
	left := make([]*proc, 0, len(ps.all))
	for p := range ps.all {
		left = append(left, p)
	}
	ps.mu.Unlock()
	for _, p := range left {
		p.kill()
	}
}
