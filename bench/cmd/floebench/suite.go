package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/floe-catalog/floe/bench"
	"github.com/floe-catalog/floe/internal/harness"
)

type suiteArgs struct {
	floe, dir, size, items, out, plot, profileDir, json, render string
}

// runSuite runs bench.RunSuite (or reads its results back with --render)
// and writes its Markdown report, the drop-latency plot and the JSON
// results where asked.
func runSuite(log *slog.Logger, a suiteArgs, timeout time.Duration) int {
	sizes, err := bench.SizesFor(a.size)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floebench: %v\n", err)
		return 2
	}
	its, err := bench.ParseItems(a.items)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floebench: %v\n", err)
		return 2
	}
	if a.floe == "" && a.render == "" {
		fmt.Fprintln(os.Stderr, "floebench: --floe is required")
		return 2
	}
	if a.out != "" && a.plot == "" {
		a.plot = filepath.Join(filepath.Dir(a.out), "benchmarks-drop.png")
	}
	args := []string{"go", "run", "./bench/cmd/floebench", "--suite", "--floe", a.floe, "--size", sizes.Name}
	if a.items != "" {
		args = append(args, "--items", a.items)
	}
	if a.out != "" {
		args = append(args, "--out", a.out)
	}
	command := "go build -o " + harness.ShellJoin([]string{a.floe}) + " ./cmd/node && " + harness.ShellJoin(args)
	// The same run from prebuilt binaries (make build elsewhere, bin/
	// copied over), as make bench runs it without a Go toolchain.
	prebuilt := append([]string{"./bin/floebench"}, args[3:]...)
	command += "\n# or, from prebuilt binaries (make build; no Go toolchain needed):\n" + harness.ShellJoin(prebuilt)

	var rep *bench.SuiteReport
	if a.render != "" {
		b, rerr := os.ReadFile(a.render)
		if rerr == nil {
			rep = new(bench.SuiteReport)
			rerr = json.Unmarshal(b, rep)
		}
		if rerr != nil {
			fmt.Fprintf(os.Stderr, "floebench: --render %s: %v\n", a.render, rerr)
			return 1
		}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		rep, err = bench.RunSuite(ctx, bench.SuiteOptions{
			Floe: a.floe, Dir: a.dir, Sizes: sizes, Items: its, Command: command, Logger: log, ProfileDir: a.profileDir,
		})
	}
	if rep != nil {
		md := rep.Markdown(plotRef(a.out, a.plot))
		fmt.Print(md)
		if a.out != "" {
			if werr := writeFile(a.out, md); werr != nil {
				log.Error("write report", "file", a.out, "error", werr)
				return 1
			}
			log.Info("report written", "file", a.out)
		}
		if a.json != "" && a.render == "" {
			b, jerr := json.MarshalIndent(rep, "", "  ")
			if jerr == nil {
				jerr = writeFile(a.json, string(b))
			}
			if jerr != nil {
				log.Error("write results", "file", a.json, "error", jerr)
				return 1
			}
		}
		if a.plot != "" && rep.Drop != nil && len(rep.Drop.Cases) > 0 {
			png, perr := rep.DropPlotPNG()
			if perr == nil {
				perr = os.WriteFile(a.plot, png, 0o644)
			}
			if perr != nil {
				log.Error("write plot", "file", a.plot, "error", perr)
				return 1
			}
			log.Info("plot written", "file", a.plot)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "floebench: %v\n", err)
		return 1
	}
	return 0
}

// plotRef is how the report links the plot: relative to the report's
// directory when both are written.
func plotRef(out, plot string) string {
	if plot == "" {
		return ""
	}
	if out != "" {
		if rel, err := filepath.Rel(filepath.Dir(out), plot); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return plot
}
