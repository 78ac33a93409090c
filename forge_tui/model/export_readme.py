"""The ``README.md`` that ``forge-tui export`` writes beside an exported kernel."""

from __future__ import annotations

from forge_tui.core.backends import backend_facts

#: The module an export writes (users import it).
MODULE_FILE = "forge_kernel.py"


def readme(task, backend: str, manifest: dict) -> str:
    """The text of an export's ``README.md``: how to call the kernel (and, for a fusion
    region's task, the operator per instance), the build, the check and the dispatch."""
    user = manifest["inputs"]
    args = ", ".join(i["name"] for i in user)
    where = backend_facts(backend).tensor_place
    kind = f"{manifest['speedup']:.3f}x over eager PyTorch ({manifest['speedup_kind']})" if manifest["speedup"] else ""
    lines = [
        f"# {task.name}: exported by forge-tui (run {manifest['run_id']}, node {manifest['node_id']}, {backend})",
        "",
        f"{task.description}. {kind}".strip(),
        "",
        f"- `{manifest['source']}`: the kernel; `{MODULE_FILE}`: a module that needs only torch and "
        f"{backend_facts(backend).compiler_name}; `manifest.json`: what this is.",
        "",
        "```python",
        'import sys; sys.path.insert(0, "/path/to/this/dir")',
        "import forge_kernel",
        f"y = forge_kernel.forward({args})        # {', '.join(i['name'] + ': ' + i['dtype'] for i in user)}; {where}",
        f"y = torch.ops.{manifest['op'].replace('::', '.')}({args}{'' if task.origin == 'catalog' else ', *params'})"
        "   # the same, as a torch custom operator",
        "```",
        "",
        f"First use compiles `{manifest['source']}` into `.forge_build/` beside the module (or loads a",
        "`kernel.so` here that is fresh: built by `forge-tui export --build`, or newer than the source).",
        "The first call on each new set of input shapes is checked against the PyTorch reference",
        "(`ForgeKernelMismatch` if it disagrees; `FORGE_VERIFY=0` skips the check). The operator has a",
        "fake (meta) implementation, so `torch.compile` traces through it.",
        "",
        "Guarded dispatch: the kernel runs only on the input shapes and dtypes it was timed on and",
        "beat eager on (`coverage` in manifest.json, `COVERAGE` in the module); other calls run the",
        "PyTorch reference. `FORGE_DISPATCH=always` uses the kernel everywhere, `FORGE_DISPATCH=never`",
        "nowhere; `forge_kernel.stats()` counts the calls sent to each, by shape.",
    ]
    region = manifest.get("region")
    if region:
        lines += [
            "",
            f"A fusion region ({region['id']}, {region['pattern'] or 'no named pattern'}) of {region['model']}, which "
            f"runs it {region['instances']} time(s) per forward, each instance on its own weights. Per instance:",
            "",
            "```python",
            f"y = {region['call']}   # that layer's parameters",
            f"y = forge_kernel.call({', '.join(i['name'] for i in user + [{'name': p} for p in manifest['params']])})"
            "   # the same",
            "```",
            "",
            "`forge-tui apply MODEL.py THIS_DIR` swaps every instance of the region in the model's forward",
            "(matched by the calls, their data flow, shapes and dtypes), checks the outputs and times it.",
        ]
    if task.origin != "catalog":
        lines += [
            "",
            "The operator takes the task file's tensor inputs and then the model's parameters and buffers.",
            "`forward(...)` uses `Model(*get_init_inputs())` built as in the search (`torch.manual_seed(0)`);",
            "`forward_with(model, ...)` uses your own instance's parameters and buffers (e.g. trained",
            "weights). Shapes other than the task file's are allowed when the ranks match; each is",
            "verified on its first call.",
        ]
    lines += ["", f"Launch signature: `{manifest['signature']}`", ""]
    return "\n".join(lines)
