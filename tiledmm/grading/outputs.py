"""The grade as files: JSON (everything in the report), JUnit XML (one testcase per case, plus
the speed part) and Gradescope's autograder results.json (`score`, `output`, `tests` with
`name`, `score`, `max_score`, `output`, `status`)."""
import json
import math
import re
import xml.etree.ElementTree as ET

__all__ = ["write_json", "write_junit", "write_gradescope", "gradescope_results", "junit_xml"]


def _clean(value):
    """NaN and infinities as null (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_json(report, path):
    _write(path, json.dumps(_clean(report.to_dict()), indent=2) + "\n")


def junit_xml(report):
    """The report as a JUnit XML string: a testsuite named after the assignment, a testcase per
    case (failure with the message), the speed part as a testcase (skipped when not graded)."""
    suite = ET.Element("testsuite", name=f"tiledmm.grade.{report.assignment}")
    failures = errors = skipped = 0
    total_ms = 0.0
    for c in report.cases:
        ms = c["ms"] if isinstance(c["ms"], float) and math.isfinite(c["ms"]) else 0.0
        total_ms += ms
        case = ET.SubElement(suite, "testcase", classname=f"grade.{report.assignment}",
                             name=c["name"], time=f"{ms / 1e3:.6f}")
        if report.compile_error is not None:
            errors += 1
            ET.SubElement(case, "error", message="compile error").text = report.compile_error
        elif not c["passed"]:
            failures += 1
            ET.SubElement(case, "failure", message=(c["message"] or "failed").splitlines()[0]
                          ).text = c["message"]
        ET.SubElement(case, "system-out").text = (
            f"mode {c['mode']}; {c['score']:g} of {c['points']:g} points; sizes {c['sizes']}")
    speed = ET.SubElement(suite, "testcase", classname=f"grade.{report.assignment}", name="speed")
    if not report.speed.get("graded"):
        skipped += 1
        ET.SubElement(speed, "skipped", message=report.speed.get("note", "not graded"))
    elif report.speed["score"] < report.speed["points"]:
        failures += 1
        ET.SubElement(speed, "failure", message=report.speed_line())
    suite.set("tests", str(len(report.cases) + 1))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total_ms / 1e3:.6f}")
    props = ET.Element("properties")
    for k, v in (("submission", report.submission), ("backend", report.backend),
                 ("kernel", report.signature or ""), ("arguments", report.mapping),
                 ("launch", report.launch), ("score", f"{report.score:g}"),
                 ("max_score", f"{report.max_score:g}")):
        ET.SubElement(props, "property", name=k, value=str(v))
    suite.insert(0, props)
    root = ET.Element("testsuites")
    root.append(suite)
    for element in root.iter():   # what a submission printed, made text XML 1.0 can hold
        element.text = _xml_safe(element.text)
        for k, v in element.attrib.items():
            element.set(k, _xml_safe(v))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


# Characters XML 1.0 cannot hold (control characters but tab, newline and carriage return;
# surrogates; U+FFFE, U+FFFF): written as \xNN / \uNNNN escapes
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(text):
    if text is None:
        return None
    text = str(text)
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                        else f"\\u{ord(m.group()):04x}", text)


def write_junit(report, path):
    _write(path, junit_xml(report) + "\n")


def gradescope_results(report):
    """Gradescope's results.json as a dict. The seed is left out when it is secret (students
    see this file)."""
    tests = []
    for c in report.cases:
        out = c["message"] or "passed"
        if report.compile_error is not None:
            out = "compile error:\n" + report.compile_error
        tests.append({"name": f"{report.assignment}: {c['name']}", "score": c["score"],
                      "max_score": c["points"], "output": f"[{c['mode']} mode] {out}",
                      "status": "passed" if c["passed"] else "failed", "visibility": "visible"})
    if report.speed.get("graded"):
        s = report.speed
        tests.append({"name": f"{report.assignment}: speed", "score": s["score"],
                      "max_score": s["points"], "output": report.speed_line(),
                      "status": "passed" if s["score"] >= s["points"] else "failed",
                      "visibility": "visible"})
    output = "\n".join(report.preamble() + [report.speed_line(), report.headline()])
    return _clean({"score": report.score, "output": output, "tests": tests,
                   "visibility": "visible", "stdout_visibility": "hidden"})


def write_gradescope(report, path):
    _write(path, json.dumps(gradescope_results(report), indent=2) + "\n")
