package xserver

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestHelperClaimProcess is not a test: run by TestClaimAcrossProcesses as a
// separate process, it claims a display number, prints it and holds it until
// its standard input closes.
func TestHelperClaimProcess(t *testing.T) {
	first := os.Getenv("DESKGRID_CLAIM_FIRST")
	if first == "" {
		t.Skip("helper process only")
	}
	f, _ := strconv.Atoi(first)
	num, err := claim(f, 50)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println(num)
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = os.Remove(LockPath(num))
}

// Several processes claiming at once each get their own display number.
func TestClaimAcrossProcesses(t *testing.T) {
	const procs = 6
	first := 700 + os.Getpid()%100*10
	var (
		mu   sync.Mutex
		nums = map[int]bool{}
		wg   sync.WaitGroup
	)
	for i := 0; i < procs; i++ {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperClaimProcess$")
		cmd.Env = append(os.Environ(), "DESKGRID_CLAIM_FIRST="+strconv.Itoa(first))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			line, _ := bufio.NewReader(out).ReadString('\n')
			n, err := strconv.Atoi(strings.TrimSpace(line))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("helper said %q", line)
				return
			}
			if nums[n] {
				t.Errorf("display :%d claimed twice", n)
			}
			nums[n] = true
		}()
	}
	wg.Wait()
	if len(nums) != procs {
		t.Fatalf("claimed %v, want %d distinct numbers", nums, procs)
	}
}
