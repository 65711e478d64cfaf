//! The SVG plot: latency percentiles per backend, uncontended (1 task) and
//! contended hand-off.

use std::path::Path;

use plotters::prelude::*;

use crate::backend::Backend;
use crate::report::Report;
use crate::stats::PLOT_PERCENTILES;
use crate::subject::Kind;

struct Series {
    backend: Backend,
    kind: Kind,
    label: String,
    points: Vec<(f64, f64)>,
}

/// One colour per backend (its servers), one line style per kind of subject.
fn color(backend: Backend) -> RGBColor {
    match backend {
        Backend::Memory => RGBColor(110, 110, 110),
        Backend::Redis => RGBColor(214, 39, 40),
        Backend::Redlock => RGBColor(255, 127, 14),
        Backend::Etcd => RGBColor(31, 119, 180),
        Backend::Zk => RGBColor(44, 160, 44),
    }
}

fn width(kind: Kind) -> u32 {
    match kind {
        Kind::Ours => 3,
        Kind::Raw | Kind::Fenced | Kind::Checked => 1,
        Kind::Peer | Kind::Deployment => 2,
    }
}

fn marker<DB: DrawingBackend>(
    kind: Kind,
    at: (i32, i32),
    style: ShapeStyle,
) -> DynElement<'static, DB, (i32, i32)> {
    match kind {
        Kind::Ours | Kind::Deployment => Circle::new(at, 4, style).into_dyn(),
        Kind::Raw => Cross::new(at, 4, style).into_dyn(),
        Kind::Peer => TriangleMarker::new(at, 5, style).into_dyn(),
        Kind::Fenced | Kind::Checked => {
            Rectangle::new([(at.0 - 3, at.1 - 3), (at.0 + 3, at.1 + 3)], style).into_dyn()
        }
    }
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {title}: {e}");
    let (chart_area, legend_area) = area.split_vertically(560);
    let values = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| *v > 0.0);
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(0.0f64, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.01, 10.0)
    };
    let last = (PLOT_PERCENTILES.len() - 1) as f64;
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.2f64..last + 0.2, (lo..hi).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_labels(PLOT_PERCENTILES.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < PLOT_PERCENTILES.len() {
                format!("p{}", PLOT_PERCENTILES[i as usize])
            } else {
                String::new()
            }
        })
        .y_desc("latency (ms, log scale)")
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(|e| err(&e))?;
    for s in series {
        let style = color(s.backend).stroke_width(width(s.kind));
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1 > 0.0)
            .map(|(j, p)| (j as f64, p.1))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(|e| err(&e))?;
        let kind = s.kind;
        chart
            .draw_series(pts.into_iter().map(|p| {
                EmptyElement::at(p) + marker(kind, (0, 0), color(s.backend).stroke_width(2))
            }))
            .map_err(|e| err(&e))?;
    }
    // The legend below the chart.
    for (i, s) in series.iter().enumerate() {
        let x = 70;
        let y = 10 + i as i32 * 17;
        let style = color(s.backend).stroke_width(width(s.kind));
        legend_area
            .draw(&PathElement::new(vec![(x, y), (x + 24, y)], style))
            .map_err(|e| err(&e))?;
        legend_area
            .draw(
                &(EmptyElement::at((x + 12, y))
                    + marker(s.kind, (0, 0), color(s.backend).stroke_width(2))),
            )
            .map_err(|e| err(&e))?;
        legend_area
            .draw(&Text::new(
                s.label.clone(),
                (x + 30, y - 6),
                ("sans-serif", 11),
            ))
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// Draws the plot to `path`.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), String> {
    let mut uncontended = Vec::new();
    let mut contended = Vec::new();
    for b in &report.backends {
        for s in &b.subjects {
            if let Some(c) = s.at(1).and_then(|u| u.cycle.as_ref()) {
                uncontended.push(Series {
                    backend: b.backend,
                    kind: s.kind,
                    label: format!("{}: {} (n={})", b.backend, s.label, c.n),
                    points: c.curve_ms.clone(),
                });
            }
            if let Some(h) = s.contended.as_ref().and_then(|c| c.handoff.as_ref()) {
                contended.push(Series {
                    backend: b.backend,
                    kind: s.kind,
                    label: format!("{}: {} (n={})", b.backend, s.label, h.n),
                    points: h.curve_ms.clone(),
                });
            }
        }
    }
    let root = SVGBackend::new(path, (1400, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| format!("plot: {e}"))?;
    let (left, right) = root.split_horizontally(700);
    panel(&left, "uncontended acquire+release, 1 task", &uncontended)?;
    panel(
        &right,
        "contended hand-off (release -> next holder)",
        &contended,
    )?;
    root.present()
        .map_err(|e| format!("plot {}: {e}", path.display()))
}
