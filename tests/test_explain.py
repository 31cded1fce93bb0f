"""Explaining decisions: the table, the picture, the stage dumps."""

import xml.etree.ElementTree as ET
from pathlib import Path

import tvm

import texscope
from conftest import ADRENO
from modules import rules
from texscope.cli import main
from texscope.explain import DumpStages, explain, graph_svg
from texscope.pipeline import annotate_module
from texscope.report import Report

RULES = str(Path(__file__).parent / "modules" / "rules.py")


def conflict_report():
    packed = texscope.ConvertToPackedLayout(ADRENO)(rules.Conflict)
    _, plans = annotate_module(packed, texscope.texture_target(ADRENO))
    return Report.from_plans("adreno-opencl", plans)


def test_the_table_gives_every_tensor_its_scope_and_reason():
    text = explain(conflict_report())
    assert "copied to buffer for m, s" in text
    assert "c_global" not in text  # copies are listed as copies, not tensors
    assert "copies: 1\n  c: global.texture-weight -> global, 8192 bytes, for m, s" in text


def test_one_tensor_and_its_neighbours():
    text = explain(conflict_report(), tensor="c")
    names = {line.split()[0] for line in text.splitlines()[1:] if line and not line.startswith(("copies", " ", "tensors"))}
    assert names == {"c", "lv", "lv1", "p", "m", "s"}


def test_the_svg_has_one_node_per_tensor_and_marks_the_copy(tmp_path):
    report = conflict_report()
    svg = graph_svg(report, tmp_path / "graph.svg")
    root = ET.parse(svg).getroot()
    ns = {"svg": "http://www.w3.org/2000/svg"}
    nodes = root.findall(".//svg:g[@class='node']", ns)
    assert len(nodes) == len(report.tensors)
    assert b'stroke="red"' in svg.read_bytes()


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
    assert names == ["01_DecomposeForGPU.py", "02_PadChannels.py", "03_ExpandBroadcastRank.py",
                     "04_FoldConstantsIfAny.py", "05_LegalizeKeepingAttrs.py",
                     "06_ConvertToPackedLayout.py", "07_LegalizeKeepingAttrs.py",
                     "08_DefineVDevice.py", "09_FoldTextureCopies.py", "10_Cleanup.py",
                     "11_AnnotateTextureScope.py", "12_texture_scope_pipeline.py"]
    assert "R.hint_on_device" in (tmp_path / "08_DefineVDevice.py").read_text()
    assert "R.hint_on_device" not in (tmp_path / "10_Cleanup.py").read_text()


def test_the_report_page_opens_in_a_real_browser(tmp_path):
    from playwright.sync_api import sync_playwright

    result = texscope.build(rules.Conflict, "adreno-opencl")
    page_path = result.export(tmp_path / "out") / "report.html"
    errors = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )
        page = browser.new_page()
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
        page.goto(page_path.as_uri())
        summary = page.inner_text("#summary")
        nodes = page.locator("#graph svg g.node").count()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert errors == []
    assert "in texture" in summary and "planned copies\t1" in summary
    assert "target\tadreno-opencl" in summary
    assert nodes == len(result.report.tensors)
    assert (tmp_path / "report.png").stat().st_size > 0


def test_a_long_network_collapses_into_chains(tmp_path):
    packed = texscope.ConvertToPackedLayout(ADRENO)(texscope.zoo.conv_chain(64))
    _, plans = annotate_module(packed, texscope.texture_target(ADRENO))
    report = Report.from_plans("adreno-opencl", plans)
    svg = graph_svg(report, tmp_path / "chain.svg", max_nodes=150)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    nodes = ET.parse(svg).getroot().findall(".//svg:g[@class='node']", ns)
    assert len(report.tensors) > 150 and len(nodes) < len(report.tensors) // 2
    assert "tensors, global.texture" in svg.read_text()


def test_explain_works_on_the_demo_model(tmp_path, capsys):
    assert main(["demo", "-o", str(tmp_path)]) == 0
    assert main(["explain", str(tmp_path / "model.py"), "--svg", str(tmp_path / "g.svg")]) == 0
    printed = capsys.readouterr().out
    assert "tensors per scope:" in printed and (tmp_path / "g.svg").exists()
