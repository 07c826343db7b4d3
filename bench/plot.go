package bench

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"strings"
)

// DropPlotPNG draws item 5's drop latency against table size, async and
// sync, on log-log axes, as a PNG. It is drawn with the standard library
// only (a 5×7 pixel font below), so the module needs no plotting package.
func (r *SuiteReport) DropPlotPNG() ([]byte, error) {
	d := r.Drop
	if d == nil || len(d.Cases) == 0 {
		return nil, errors.New("no drop measurements to plot")
	}
	var series []plotSeries
	for _, mode := range []struct {
		name string
		col  color.RGBA
	}{{"async", color.RGBA{0x1f, 0x77, 0xb4, 0xff}}, {"sync (purge awaited)", color.RGBA{0xd6, 0x27, 0x28, 0xff}}} {
		s := plotSeries{name: mode.name, col: mode.col}
		for _, files := range r.Options.Sizes.DropFiles {
			if c, ok := d.Case(files, strings.Fields(mode.name)[0]); ok {
				s.x = append(s.x, float64(files))
				s.y = append(s.y, float64(c.Latency.Microseconds())/1000)
			}
		}
		series = append(series, s)
	}
	return logLogPlot("floe: drop table with purge, latency vs table size", "data files in the table (log scale)", "drop latency (ms, log scale)", series)
}

type plotSeries struct {
	name string
	col  color.RGBA
	x, y []float64
}

const (
	plotW, plotH                       = 900, 560
	marginL, marginR, marginT, marginB = 110, 40, 84, 80
	fontScale                          = 2
)

// logLogPlot draws the series with decade axes covering every point.
func logLogPlot(title, xlabel, ylabel string, series []plotSeries) ([]byte, error) {
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for i := range s.x {
			if s.x[i] <= 0 || s.y[i] <= 0 {
				continue
			}
			minX, maxX = math.Min(minX, s.x[i]), math.Max(maxX, s.x[i])
			minY, maxY = math.Min(minY, s.y[i]), math.Max(maxY, s.y[i])
		}
	}
	if math.IsInf(minX, 1) {
		return nil, errors.New("nothing positive to plot")
	}
	x0, x1 := math.Floor(math.Log10(minX)), math.Ceil(math.Log10(maxX))
	y0, y1 := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	if x1 == x0 {
		x1++
	}
	if y1 == y0 {
		y1++
	}
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})
	pw, ph := plotW-marginL-marginR, plotH-marginT-marginB
	px := func(x float64) int { return marginL + int(math.Round((math.Log10(x)-x0)/(x1-x0)*float64(pw))) }
	py := func(y float64) int { return marginT + ph - int(math.Round((math.Log10(y)-y0)/(y1-y0)*float64(ph))) }
	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	black := color.RGBA{0, 0, 0, 0xff}
	for e := x0; e <= x1; e++ {
		x := px(math.Pow(10, e))
		line(img, x, marginT, x, marginT+ph, grid)
		lbl := decadeLabel(e, "")
		text(img, x-textWidth(lbl)/2, marginT+ph+10, lbl, black)
	}
	for e := y0; e <= y1; e++ {
		y := py(math.Pow(10, e))
		line(img, marginL, y, marginL+pw, y, grid)
		lbl := decadeLabel(e, " ms")
		text(img, marginL-10-textWidth(lbl), y-7, lbl, black)
	}
	rect(img, marginL, marginT, marginL+pw, marginT+ph, black)
	text(img, (plotW-textWidth(title))/2, 10, title, black)
	text(img, marginL+(pw-textWidth(xlabel))/2, plotH-35, xlabel, black)
	text(img, 8, marginT-38, ylabel, black)
	for si, s := range series {
		for i := range s.x {
			x, y := px(s.x[i]), py(s.y[i])
			if i > 0 {
				thickLine(img, px(s.x[i-1]), py(s.y[i-1]), x, y, s.col)
			}
			fill(img, image.Rect(x-4, y-4, x+5, y+5), s.col)
			lbl := fmt.Sprintf("%.0f", s.y[i])
			if s.y[i] < 10 {
				lbl = fmt.Sprintf("%.1f", s.y[i])
			}
			text(img, x+8, y-16, lbl, s.col)
		}
		// Legend, top left inside the frame.
		ly := marginT + 12 + si*22
		fill(img, image.Rect(marginL+12, ly, marginL+32, ly+12), s.col)
		text(img, marginL+40, ly-1, s.name, black)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decadeLabel prints 10^e compactly: 1, 10, 100, 1k, 10k, … (x axis) or
// with a unit.
func decadeLabel(e float64, unit string) string {
	v := math.Pow(10, e)
	switch {
	case unit == "" && v >= 1e6:
		return fmt.Sprintf("%.0fm", v/1e6)
	case unit == "" && v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1:
		return fmt.Sprintf("%.0f%s", v, unit)
	}
	return fmt.Sprintf("%g%s", v, unit)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func rect(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	line(img, x0, y0, x1, y0, c)
	line(img, x0, y1, x1, y1, c)
	line(img, x0, y0, x0, y1, c)
	line(img, x1, y0, x1, y1, c)
}

// line draws with Bresenham's algorithm.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for range plotW + plotH { // bounded: no line is longer than this
		if image.Pt(x0, y0).In(img.Bounds()) {
			img.SetRGBA(x0, y0, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thickLine(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func textWidth(s string) int { return len([]rune(s)) * 6 * fontScale }

// text draws s with the 5×7 font at fontScale, top-left at (x, y).
// Characters without a glyph are drawn as blanks.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, ch := range s {
		if g, ok := glyphs[ch]; ok {
			for row, bits := range g {
				for col, b := range bits {
					if b == '#' {
						fill(img, image.Rect(x+col*fontScale, y+row*fontScale, x+(col+1)*fontScale, y+(row+1)*fontScale), c)
					}
				}
			}
		}
		x += 6 * fontScale
	}
}

// glyphs is a 5×7 pixel font for the characters the plot uses.
var glyphs = map[rune][7]string{
	'0': {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."},
	'1': {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'2': {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"},
	'3': {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."},
	'4': {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."},
	'5': {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."},
	'6': {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."},
	'7': {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."},
	'8': {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."},
	'9': {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."},
	'a': {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"},
	'b': {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."},
	'c': {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."},
	'd': {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"},
	'e': {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."},
	'f': {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."},
	'g': {".....", ".####", "#...#", "#...#", ".####", "....#", ".###."},
	'h': {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"},
	'i': {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."},
	'j': {"...#.", ".....", "..##.", "...#.", "...#.", "#..#.", ".##.."},
	'k': {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."},
	'l': {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'm': {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"},
	'n': {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"},
	'o': {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."},
	'p': {".....", "####.", "#...#", "#...#", "####.", "#....", "#...."},
	'q': {".....", ".....", ".##.#", "#..##", ".####", "....#", "....#"},
	'r': {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."},
	's': {".....", ".....", ".###.", "#....", ".###.", "....#", "####."},
	't': {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."},
	'u': {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"},
	'v': {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."},
	'w': {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."},
	'x': {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"},
	'y': {".....", ".....", "#...#", "#...#", ".####", "....#", ".###."},
	'z': {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"},
	'R': {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"},
	'T': {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."},
	'K': {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"},
	'.': {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."},
	',': {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."},
	':': {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."},
	'-': {".....", ".....", ".....", "#####", ".....", ".....", "....."},
	'=': {".....", ".....", "#####", ".....", "#####", ".....", "....."},
	'(': {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."},
	')': {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."},
	'/': {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."},
}
