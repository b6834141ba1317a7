//! Pictures of a suite's results (`--plot DIR`), each written as SVG and as PNG:
//! - `SUITE-latency`: every implementation's round trips on one chart, HDR-style: the
//!   percentile on a log scale of `1 / (1 - q)` (0%, 90%, 99%, 99.9%, ...) across, the round
//!   trip in ns on a log scale up; each line is the implementation's histogram merged over all
//!   rounds of the run;
//! - `SUITE-throughput`: a bar per implementation and throughput case (msgs/s, log scale),
//!   the bar's height the median over rounds and its whisker the smallest to the largest round.
//!
//! Text is drawn with plotters' pure-Rust `ab_glyph` renderer from an embedded DejaVu Sans, so
//! PNGs need no system fonts or libraries.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hdrhistogram::Histogram;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::harness::{Collector, Figure};

/// Picture size in pixels (SVG and PNG alike).
const SIZE: (u32, u32) = (1200, 650);

/// The font family every text uses; registered once from the embedded DejaVu Sans.
const FONT: &str = "sans-serif";

/// Line and bar colours, one per implementation or case, in order.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Writes `DIR/SUITE-latency.{svg,png}` (if the suite measured round trips) and
/// `DIR/SUITE-throughput.{svg,png}` (if it measured throughput), captioned with `machine`;
/// returns the files written.
///
/// # Errors
///
/// The directory cannot be made, or a picture cannot be drawn or written, with the file named.
pub fn suite(dir: &Path, out: &Collector, machine: &str) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let suite = out.suite();
    let mut written = Vec::new();
    if !out.histograms().is_empty() {
        let caption = format!("{suite}: round-trip latency by percentile, all rounds");
        let h = out.histograms();
        written.extend(both(
            dir,
            &format!("{suite}-latency"),
            |root| latency(root, &caption, machine, &h),
            |root| latency(root, &caption, machine, &h),
        )?);
    }
    let figures: Vec<Figure> = out
        .figures()
        .into_iter()
        .filter(|f| f.unit == "msgs/s" && f.value.is_some())
        .collect();
    if !figures.is_empty() {
        let caption = format!("{suite}: throughput (bar: median over rounds; line: min..max)");
        written.extend(both(
            dir,
            &format!("{suite}-throughput"),
            |root| throughput(root, &caption, machine, &figures),
            |root| throughput(root, &caption, machine, &figures),
        )?);
    }
    Ok(written)
}

fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded DejaVu Sans font did not load".to_string())
        })
        .clone()
}

/// Draws one picture into `DIR/NAME.svg` with `svg` and into `DIR/NAME.png` with `png` (the
/// same drawing function, once per backend type).
fn both<S, P>(dir: &Path, name: &str, svg: S, png: P) -> Result<Vec<PathBuf>, String>
where
    S: Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
    P: Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
{
    let svg_path = dir.join(format!("{name}.svg"));
    let png_path = dir.join(format!("{name}.png"));
    let failed = |path: &Path, e: String| format!("cannot draw {}: {e}", path.display());
    {
        let root = SVGBackend::new(&svg_path, SIZE).into_drawing_area();
        svg(&root).map_err(|e| failed(&svg_path, e))?;
        root.present()
            .map_err(|e| failed(&svg_path, e.to_string()))?;
    }
    {
        let root = BitMapBackend::new(&png_path, SIZE).into_drawing_area();
        png(&root).map_err(|e| failed(&png_path, e))?;
        root.present()
            .map_err(|e| failed(&png_path, e.to_string()))?;
    }
    Ok(vec![svg_path, png_path])
}

/// The highest percentile axis value, as `-log10(1 - q)`: 6 is 99.9999%.
const MAX_NINES: f64 = 6.0;

/// `q` as the percentile axis value `-log10(1 - q)`.
fn nines(q: f64) -> f64 {
    (-(1.0 - q).max(10f64.powf(-MAX_NINES)).log10()).max(0.0)
}

/// The axis label of percentile axis value `x`: 0 -> "0%", 1 -> "90%", 3 -> "99.9%".
fn percentile_label(x: f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    let digits = (x.round() as usize).saturating_sub(2);
    format!("{q:.digits$}%")
}

/// A histogram's percentile curve: (axis value, ns) points.
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = h
        .iter_quantiles(5)
        .map(|v| {
            (
                nines(v.quantile_iterated_to()),
                v.value_iterated_to().max(1) as f64,
            )
        })
        .collect();
    points.push((
        nines(1.0 - 1.0 / h.len().max(1) as f64),
        h.max().max(1) as f64,
    ));
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// Fills `root` white, writes `caption` at its top, and returns the area below it.
fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    caption: &str,
) -> Result<DrawingArea<DB, Shift>, String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    root.titled(caption, (FONT, 22)).map_err(|e| e.to_string())
}

fn latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    caption: &str,
    machine: &str,
    histograms: &[&(&'static str, Histogram<u64>)],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let area = titled(root, caption)?;
    let curves: Vec<(&str, Vec<(f64, f64)>)> =
        histograms.iter().map(|(n, h)| (*n, curve(h))).collect();
    let values = curves.iter().flat_map(|(_, c)| c.iter().map(|p| p.1));
    let lo = values.clone().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = values.fold(1.0, f64::max);
    let x_max = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        .ceil()
        .min(MAX_NINES);
    let mut chart = ChartBuilder::on(&area)
        .caption(machine, (FONT, 14))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, (lo / 1.5..hi * 1.5).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("percentile (log scale of 1 / (1 - q))")
        .y_desc("round trip (ns, log scale)")
        .label_style((FONT, 14))
        .draw()
        .map_err(e)?;
    for (i, (name, points)) in curves.into_iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

fn throughput<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    caption: &str,
    machine: &str,
    figures: &[Figure],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let area = titled(root, caption)?;
    let mut impls: Vec<&str> = Vec::new();
    let mut cases: Vec<&str> = Vec::new();
    for f in figures {
        if !impls.contains(&f.implementation) {
            impls.push(f.implementation);
        }
        if !cases.contains(&f.case) {
            cases.push(f.case);
        }
    }
    let millions = |v: f64| v / 1e6;
    let all = figures
        .iter()
        .flat_map(|f| [f.value, f.min, f.max])
        .flatten()
        .map(millions);
    let lo = all.clone().fold(f64::INFINITY, f64::min).max(1e-3);
    let hi = all.fold(1e-3, f64::max);
    let base = lo / 2.0;
    let mut chart = ChartBuilder::on(&area)
        .caption(machine, (FONT, 14))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..impls.len() as f64, (base..hi * 2.0).log_scale())
        .map_err(e)?;
    let names = impls.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * impls.len() + 1)
        .x_label_formatter(&|x| {
            // Labels sit at the middle of each implementation's group.
            let i = x.floor() as usize;
            if (x.fract() - 0.5).abs() < 1e-6 && i < names.len() {
                names[i].to_string()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y}"))
        .y_desc("M msgs/s (log scale)")
        .label_style((FONT, 13))
        .draw()
        .map_err(e)?;
    let width = 0.8 / cases.len() as f64;
    for (j, case) in cases.iter().enumerate() {
        let colour = COLOURS[j % COLOURS.len()];
        let bars: Vec<(f64, &Figure)> = figures
            .iter()
            .filter(|f| f.case == *case)
            .filter_map(|f| {
                let i = impls.iter().position(|n| *n == f.implementation)?;
                Some((i as f64 + 0.1 + j as f64 * width, f))
            })
            .collect();
        chart
            .draw_series(bars.iter().filter_map(|&(x, f)| {
                let v = millions(f.value?);
                Some(Rectangle::new(
                    [(x, base), (x + width * 0.9, v)],
                    colour.filled(),
                ))
            }))
            .map_err(e)?
            .label(*case)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], colour.filled()));
        chart
            .draw_series(bars.iter().filter_map(|&(x, f)| {
                let mid = x + width * 0.45;
                let (lo, hi) = (millions(f.min?), millions(f.max?));
                Some(PathElement::new(
                    vec![(mid, lo), (mid, hi)],
                    BLACK.stroke_width(2),
                ))
            }))
            .map_err(e)?;
        chart
            .draw_series(bars.iter().filter_map(|&(x, f)| {
                let v = millions(f.value?);
                // Above the whisker, so the two do not overlap.
                let top = f.max.map_or(v, millions).max(v) * 1.05;
                let style = TextStyle::from((FONT, 12).into_font())
                    .pos(Pos::new(HPos::Center, VPos::Bottom));
                Some(Text::new(format_rate(v), (x + width * 0.45, top), style))
            }))
            .map_err(e)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Both pictures' chart: a linear x axis, a log y axis.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// Draws the series' legend box at `position`.
fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())
}

/// A rate in M msgs/s with three significant digits.
fn format_rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::latency_histogram;

    #[test]
    fn percentile_axis() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.99) - 2.0).abs() < 1e-9);
        assert_eq!(nines(1.0), MAX_NINES);
        assert_eq!(percentile_label(0.0), "0%");
        assert_eq!(percentile_label(1.0), "90%");
        assert_eq!(percentile_label(2.0), "99%");
        assert_eq!(percentile_label(3.0), "99.9%");
        assert_eq!(percentile_label(5.0), "99.999%");
    }

    #[test]
    fn writes_both_pictures_as_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("llbus-plot-test-{}", std::process::id()));
        let mut out = Collector::new("ring", false);
        let mut h = latency_histogram();
        for v in 1..=10_000u64 {
            h.record(100 + v % 50).unwrap();
        }
        out.add_rtt::<String>("llbus", Ok(&h));
        out.add_rtt::<String>("rtrb", Ok(&h));
        for v in [100e6, 120e6, 90e6] {
            out.add("llbus", "throughput_single", "msgs/s", v);
            out.add("llbus", "throughput_batch", "msgs/s", 3.0 * v);
        }
        out.add("rtrb", "throughput_single", "msgs/s", 80e6);
        let files = suite(&dir, &out, "test machine").expect("pictures");
        let names: Vec<String> = files
            .iter()
            .filter_map(|f| f.file_name()?.to_str().map(String::from))
            .collect();
        assert_eq!(
            names,
            [
                "ring-latency.svg",
                "ring-latency.png",
                "ring-throughput.svg",
                "ring-throughput.png"
            ]
        );
        for f in &files {
            let bytes = std::fs::read(f).expect("written");
            if f.extension().is_some_and(|e| e == "png") {
                assert_eq!(&bytes[1..4], b"PNG", "{}", f.display());
            } else {
                let text = String::from_utf8(bytes).expect("svg is text");
                assert!(text.contains("<svg"), "{}", f.display());
                assert!(text.contains("llbus"), "{} lacks the legend", f.display());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
