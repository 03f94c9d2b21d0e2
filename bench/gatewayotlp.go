package main

import (
	"math"
	"strings"
)

// profileRows is how many rows of each listing of a gateway profile
// (go tool pprof -top, and -top -cum) the report shows.
const profileRows = 12

// otlpRatio is the gateway's samples/s from OTLP over its samples/s from
// remote write in the same round.
func (r gatewayRound) otlpRatio() float64 {
	return r.OTLP.samplesPerSec() / r.Gateway.samplesPerSec()
}

// otlpCPURatio is the gateway's CPU per sample on OTLP over its CPU per
// sample on remote write: above 1, an OTLP sample costs more.
func (r gatewayRound) otlpCPURatio() float64 {
	return r.OTLP.cpuPerMSamples(r.OTLP.ProcCPU) / r.Gateway.cpuPerMSamples(r.Gateway.ProcCPU)
}

// otlpMeasured says whether the round measured both remote write and OTLP.
func (r gatewayRound) otlpMeasured() bool {
	return r.Gateway.Err == "" && r.OTLP.Err == "" && r.Gateway.Samples > 0 && r.OTLP.Samples > 0
}

// otlpMedian is the median of f over the rounds that measured both remote
// write and OTLP, with the smallest and largest.
func (g *gatewayResult) otlpMedian(f func(gatewayRound) float64) (med, lo, hi float64) {
	var xs []float64
	for _, r := range g.Rounds {
		if r.otlpMeasured() {
			if v := f(r); !math.IsNaN(v) && !math.IsInf(v, 0) {
				xs = append(xs, v)
			}
		}
	}
	return medianOf(xs)
}

// otlpSection writes the OTLP windows beside the remote-write ones.
func (r *report) otlpSection(w writer) {
	g := r.Gateway
	if g == nil || !g.Cfg.OTLP {
		return
	}
	w("\nOTLP beside remote write: after each round's remote-write window, the same %d clients send the same series and samples as OTLP/HTTP to `/otlp/v1/metrics` "+
		"(one gauge per series named by its `__name__`, one data point, the other labels as attributes): %s B of protobuf, %s B gzip-compressed, as the Collector's "+
		"`otlphttp` exporter sends by default. Same window, warm-up and counting; a 200 whose `partial_success` rejected points counts as failed.\n\n",
		g.Cfg.Clients, fmtNum(float64(g.OTLPRawBytes)), fmtNum(float64(g.OTLPBodyBytes)))
	w("| round | remote write samples/s | OTLP samples/s | OTLP ÷ remote write samples/s | remote write gateway CPU s / M samples | OTLP gateway CPU s / M samples | OTLP ÷ remote write CPU per sample | OTLP clients CPU s / M samples | OTLP failed requests |\n")
	w("|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i, rd := range g.Rounds {
		if !rd.otlpMeasured() {
			w("| %d | FAILED: %s | | | | | | | |\n", i+1, oneLine(strings.TrimSpace(rd.Gateway.Err+" "+rd.OTLP.Err+" "+rd.OTLP.FirstErr)))
			continue
		}
		failed := fmtNum(float64(rd.OTLP.Failed))
		if rd.OTLP.FirstErr != "" {
			failed += " (" + oneLine(rd.OTLP.FirstErr) + ")"
		}
		w("| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", i+1,
			fmtNum(rd.Gateway.samplesPerSec()), fmtNum(rd.OTLP.samplesPerSec()), fmtF(rd.otlpRatio(), 2),
			fmtF(rd.Gateway.cpuPerMSamples(rd.Gateway.ProcCPU), 2), fmtF(rd.OTLP.cpuPerMSamples(rd.OTLP.ProcCPU), 2), fmtF(rd.otlpCPURatio(), 2),
			fmtF(rd.OTLP.cpuPerMSamples(rd.OTLP.HarnessCPU), 2), failed)
	}
	if len(g.Rounds) > 1 {
		med, lo, hi := g.otlpMedian(gatewayRound.otlpRatio)
		cmed, clo, chi := g.otlpMedian(gatewayRound.otlpCPURatio)
		w("\nMedian over the rounds: OTLP ÷ remote write samples/s %s (%s–%s), CPU per sample %s (%s–%s).\n",
			fmtF(med, 2), fmtF(lo, 2), fmtF(hi, 2), fmtF(cmed, 2), fmtF(clo, 2), fmtF(chi, 2))
	}
	if len(g.OTLPProfile) > 0 {
		// The first rows only: the page stays short, the file is kept
		// with -keep-work.
		top, cum := g.OTLPProfile[:min(profileRows, len(g.OTLPProfile))], g.OTLPProfileCum[:min(profileRows, len(g.OTLPProfileCum))]
		w("\nWhere the gateway's CPU goes on OTLP: the same profile over the last round's OTLP window, the first %d rows of `-top` (self) and `-top -cum`:\n\n", profileRows)
		head := "      flat  flat%%   sum%%        cum   cum%%\n"
		w("```\n"+head+"%s\n```\n\n```\n"+head+"%s\n```\n", strings.Join(top, "\n"), strings.Join(cum, "\n"))
	}
}
