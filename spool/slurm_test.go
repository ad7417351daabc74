package spool

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSlurm(t *testing.T) {
	tests := []struct {
		name, slurm string
		want        *Slurm
		local       bool
		wantErr     string
	}{
		{"absent", ``, nil, false, ""},
		{"true: the defaults", `, "slurm": true`, &Slurm{}, false, ""},
		{"false: here", `, "slurm": false`, nil, true, ""},
		{"settings", `, "slurm": {"partition": "gpu", "cpus": 4, "memory": "8G", "gpus": "a100:2", "nodes": 2, "time": "90m", "account": "lab", "qos": "high", "constraint": "avx2&ib", "args": ["--exclusive", "--mail-type=END"]}`,
			&Slurm{Partition: "gpu", CPUs: 4, Memory: "8G", GPUs: "a100:2", Nodes: 2, Time: Duration(90 * time.Minute), Account: "lab", QOS: "high", Constraint: "avx2&ib", Args: []string{"--exclusive", "--mail-type=END"}}, false, ""},
		{"unknown field", `, "slurm": {"partiton": "x"}`, nil, false, `"slurm": unknown field "partiton"`},
		{"memory", `, "slurm": {"memory": "8 GB"}`, nil, false, `"slurm": "memory": "8 GB"`},
		{"partition with a newline", `, "slurm": {"partition": "a\n#SBATCH --uid=0"}`, nil, false, `"slurm": "partition"`},
		{"gpus", `, "slurm": {"gpus": "all"}`, nil, false, `"slurm": "gpus"`},
		{"negative cpus", `, "slurm": {"cpus": -1}`, nil, false, `"slurm": "cpus": -1: want 1 to 1048576 (or leave it out)`},
		{"too many nodes", `, "slurm": {"nodes": 1048577}`, nil, false, `"slurm": "nodes": 1048577: want 1 to 1048576 (or leave it out)`},
		{"short time", `, "slurm": {"time": "10ms"}`, nil, false, `"time": 10ms`},
		{"an option tend sets", `, "slurm": {"args": ["--output=/etc/x"]}`, nil, false, `tend sets --output itself`},
		{"an option with a field", `, "slurm": {"args": ["--partition=x"]}`, nil, false, `tend sets --partition itself, or it has a field of its own`},
		{"a script file", `, "slurm": {"args": ["/etc/shadow"]}`, nil, false, `each is one sbatch option`},
		{"a short option", `, "slurm": {"args": ["-p", "x"]}`, nil, false, `each is one sbatch option`},
		{"a newline in a value", `, "slurm": {"args": ["--mail-user=a\nb"]}`, nil, false, `each is one sbatch option`},
		{"what only a local run has", `, "slurm": {}, "limits": {"nofile": 10}`, nil, false, `a run on Slurm cannot have "health", "ready_file" or "limits"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseStart([]byte(`{"command": "x"` + tt.slurm + `}`))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(s.Slurm, tt.want) || s.Local != tt.local {
				t.Fatalf("got %+v, local %v, %v; want %+v, local %v", s.Slurm, s.Local, err, tt.want, tt.local)
			}
			b, err := s.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseStart(b)
			if err != nil || !reflect.DeepEqual(back.Slurm, s.Slurm) || back.Local != s.Local {
				t.Fatalf("round trip of %s: %+v, %v", b, back.Slurm, err)
			}
		})
	}
}

func TestSlurmMergeAndArgs(t *testing.T) {
	root := Slurm{Partition: "batch", Account: "lab", Args: []string{"--exclusive"}}
	session := &Slurm{Partition: "gpu", GPUs: "1"}
	req := &Slurm{CPUs: 4, Time: Duration(61 * time.Second), Args: []string{"--mail-type=END"}}
	got := root.Merge(session).Merge(req)
	want := Slurm{Partition: "gpu", Account: "lab", GPUs: "1", CPUs: 4, Time: Duration(61 * time.Second), Args: []string{"--exclusive", "--mail-type=END"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Merge = %+v, want %+v", got, want)
	}
	args := got.SbatchArgs()
	wantArgs := []string{"--partition=gpu", "--cpus-per-task=4", "--gpus=1", "--time=0-00:01:01", "--account=lab", "--exclusive", "--mail-type=END"}
	if !reflect.DeepEqual(args, wantArgs) {
		t.Fatalf("SbatchArgs = %q, want %q", args, wantArgs)
	}
	if got := slurmTime(49*time.Hour + 500*time.Millisecond); got != "2-01:00:01" {
		t.Errorf("slurmTime = %s", got)
	}
}
