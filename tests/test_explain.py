"""Explaining decisions: the table, the picture, the stage dumps."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import tvm

import texscope
from conftest import ADRENO, conv_reads_pay
from modules import rules
from texscope.cli import main
from texscope.diagnostics.explain import DumpStages, explain, graph_svg, parameter_side
from texscope.frontend.naming import ConvertKeepingNames
from texscope.pipeline import annotate_module
from texscope.diagnostics.report import Report

RULES = str(Path(__file__).parent / "modules" / "rules.py")


def conflict_report():
    """The Conflict module's report, under prices that make c a texture
    copied for the reductions (with the defaults the conv reads a buffer)."""
    packed = ConvertKeepingNames(ADRENO)(rules.Conflict)
    _, plans = annotate_module(packed, texscope.texture_target(ADRENO, conv_reads_pay()))
    return Report.from_plans("adreno-opencl", plans)


def test_the_table_gives_every_tensor_its_scope_and_reason():
    text = explain(conflict_report())
    # p, m and s are returned: their names go to the layout transforms back,
    # the packed computations are p_packed, m_packed and s_packed.
    assert "copied to buffer for m_packed, s_packed" in text
    assert "c_global" not in text  # copies are listed as copies, not tensors
    assert "copies: 1\n  c: global.texture-weight -> global, 8192 bytes, for m_packed, s_packed" in text


def test_one_tensor_and_its_neighbours():
    text = explain(conflict_report(), tensor="c")
    names = {line.split()[0] for line in text.splitlines()[1:] if line and not line.startswith(("copies", " ", "tensors"))}
    assert names == {"c", "x_layout_transform", "w_layout_transform", "p_packed", "m_packed", "s_packed"}


def test_the_svg_draws_parameters_as_marks_and_marks_the_copy(tmp_path):
    report = conflict_report()
    side = {report.tensors[i].name for _, i in parameter_side(report)}
    assert side == {"w", "k", "w_layout_transform", "k_layout_transform"}
    svg = graph_svg(report, tmp_path / "graph.svg")
    root = ET.parse(svg).getroot()
    ns = {"svg": "http://www.w3.org/2000/svg"}
    titles = [a.get("{http://www.w3.org/1999/xlink}title")
              for a in root.findall(".//svg:g[@class='node']//svg:a", ns)]
    assert sorted(t.split(":")[0] for t in titles) == sorted(
        r.name for r in report.tensors if r.name not in side)
    # The convs' packed weights are one small square each, in the weights' colour.
    marks = [p for p in root.findall(".//svg:g[@class='node']//svg:polygon", ns)
             if p.get("stroke") == "transparent" and p.get("fill") == "#74c476"]
    assert len(marks) == 2
    assert b'stroke="red"' in svg.read_bytes()


def test_svg_with_a_tensor_draws_its_neighbourhood(tmp_path):
    report = conflict_report()
    whole = graph_svg(report, tmp_path / "whole.svg").read_bytes()
    focused = graph_svg(report, tmp_path / "c.svg", focus="c")
    ns = {"svg": "http://www.w3.org/2000/svg"}
    titles = {a.get("{http://www.w3.org/1999/xlink}title").split(":")[0]
              for a in ET.parse(focused).getroot().findall(".//svg:g[@class='node']//svg:a", ns)}
    assert titles == {"c", "x_layout_transform", "w_layout_transform", "p_packed", "m_packed", "s_packed"}
    assert focused.read_bytes() != whole


def test_the_explain_command(tmp_path, capsys):
    assert main(["explain", RULES, "--module", "Conflict", "--tensor", "c",
                 "--svg", str(tmp_path / "g.svg")]) == 0
    assert "read directly by p" in capsys.readouterr().out
    assert (tmp_path / "g.svg").read_text().startswith("<?xml")


def test_dump_stages_writes_each_stage(tmp_path):
    with tvm.transform.PassContext(instruments=[DumpStages(tmp_path)]):
        texscope.texture_scope_pipeline(ADRENO)(rules.ConvRelu)
    names = sorted(p.name for p in tmp_path.iterdir())
    # Nested passes come before the pass that runs them.
    assert names == ["01_DecomposeForGPU.py", "02_ClipAsMaxMin.py", "03_SplitGlobalPools.py",
                     "04_PadChannels.py", "05_ExpandBroadcastRank.py",
                     "06_ConvertLayoutByRules.py", "07_PadWholeTexels.py",
                     "08_FoldConstantsIfAny.py", "09_LegalizeKeepingAttrs.py",
                     "10_ConvertToPackedLayout.py", "11_LegalizeKeepingAttrs.py",
                     "12_DefineVDevice.py", "13_FoldTextureCopies.py", "14_Cleanup.py",
                     "15_AnnotateTextureScope.py", "16_texture_scope_pipeline.py"]
    defined = (tmp_path / "12_DefineVDevice.py").read_text()
    assert "global.texture" in defined and "R.hint_on_device" not in defined


def _browser(playwright):
    return playwright.chromium.launch(
        executable_path="/usr/bin/chromium",
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run"],
    )


def test_the_report_page_opens_in_a_real_browser(tmp_path):
    from playwright.sync_api import sync_playwright

    result = texscope.build(rules.Conflict, "adreno-opencl", profile=conv_reads_pay())
    page_path = result.export(tmp_path / "out") / "report.html"
    errors = []
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_page()
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
        page.goto(page_path.as_uri())
        summary = page.inner_text("#summary")
        legend = page.inner_text("#legend")
        nodes = page.locator("#graph svg g.node").count()
        browser.close()
    assert errors == []
    assert "in texture" in summary and "planned copies\t1" in summary
    assert "target\tadreno-opencl" in summary
    assert "global.texture-weight: the 5-D tensor [d0, d1, d2, d3, 4] is an image array" in legend
    assert "red dashed edge: a copy" in legend
    assert nodes == len(result.report.tensors) - len(parameter_side(result.report))


# Counts, in a PNG screenshot drawn into a canvas, the pixels of each node fill.
_COUNT_FILLS = """async ([png, fills]) => {
  const image = new Image();
  image.src = 'data:image/png;base64,' + png;
  await image.decode();
  const canvas = document.createElement('canvas');
  canvas.width = image.width; canvas.height = image.height;
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  const data = context.getImageData(0, 0, image.width, image.height).data;
  const counts = fills.map(() => 0);
  for (let i = 0; i < data.length; i += 4) {
    fills.forEach(([r, g, b], k) => {
      if (Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) < 6) counts[k]++;
    });
  }
  return counts;
}"""


def test_the_first_screen_of_the_report_shows_the_whole_graph(tmp_path):
    import base64

    from playwright.sync_api import sync_playwright

    from texscope.diagnostics.explain import COLOURS
    from texscope.diagnostics.report_page import report_html

    packed = ConvertKeepingNames(ADRENO)(texscope.models.zoo.resnet_style(blocks=2))
    _, plans = annotate_module(packed, texscope.texture_target(ADRENO))
    report = Report.from_plans("adreno-opencl", plans)
    (page_path, _svg) = report_html(report, tmp_path / "report.html")
    fills = [COLOURS["global.texture-weight"], COLOURS["global"]]
    with sync_playwright() as playwright:
        browser = _browser(playwright)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(page_path.as_uri())
        shot = page.screenshot()  # the first screen only
        counts = page.evaluate(_COUNT_FILLS, [base64.b64encode(shot).decode(),
                                              [[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in fills]])
        box = page.locator("#graph svg").bounding_box()
        nodes = [page.locator("#graph svg g.node").nth(i).bounding_box()
                 for i in range(page.locator("#graph svg g.node").count())]
        before = page.get_attribute("#graph svg", "viewBox")
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.wheel(0, -300)
        zoomed = page.get_attribute("#graph svg", "viewBox")
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 100, box["y"] + box["height"] / 2)
        page.mouse.up()
        panned = page.get_attribute("#graph svg", "viewBox")
        page.click("#zoom-fit")
        fitted = page.get_attribute("#graph svg", "viewBox")
        browser.close()
    # Textures and buffers both show on the first screen, and every node of
    # the graph lies inside it.
    assert counts[0] > 2000 and counts[1] > 200, counts
    assert box["y"] + box["height"] <= 800 and box["x"] + box["width"] <= 1280
    assert len(nodes) == len(report.tensors) - len(parameter_side(report)) and len(nodes) < 60
    assert all(box["y"] - 1 <= n["y"] and n["y"] + n["height"] <= box["y"] + box["height"] + 1
               for n in nodes)
    width = lambda view: float(view.split()[2])  # noqa: E731
    assert width(zoomed) < width(before) and panned.split()[0] != zoomed.split()[0]
    assert [float(v) for v in fitted.split()] == pytest.approx([float(v) for v in before.split()])


def test_a_long_network_collapses_into_chains(tmp_path):
    packed = ConvertKeepingNames(ADRENO)(texscope.models.zoo.conv_chain(64))
    _, plans = annotate_module(packed, texscope.texture_target(ADRENO))
    report = Report.from_plans("adreno-opencl", plans)
    svg = graph_svg(report, tmp_path / "chain.svg", max_nodes=100)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    nodes = ET.parse(svg).getroot().findall(".//svg:g[@class='node']", ns)
    drawn = len(report.tensors) - len(parameter_side(report))
    assert drawn > 100 and len(nodes) < drawn // 2
    assert "tensors, global.texture" in svg.read_text()


def test_explain_works_on_the_demo_model(tmp_path, capsys):
    assert main(["demo", "-o", str(tmp_path)]) == 0
    assert main(["explain", str(tmp_path / "model.py"), "--svg", str(tmp_path / "g.svg")]) == 0
    printed = capsys.readouterr().out
    assert "tensors per scope:" in printed and (tmp_path / "g.svg").exists()
