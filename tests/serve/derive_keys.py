"""Derive the config keys an engine release accepts, by parsing (never importing) its source.

TensorRT-LLM: ``tensorrt_llm/llmapi/llm_args.py`` gives the keys of a ``--config`` YAML (the fields
of ``TorchLlmArgs`` and its bases, nested config classes, Literal/StrEnum choices, the
``speculative_config`` dispatch table); ``tensorrt_llm/commands/serve.py`` gives the click options
of ``trtllm-serve serve``. SGLang: ``python/sglang/srt/server_args.py`` plus, for releases that
declare flags as annotated fields (0.5.14+), ``srt/arg_groups/fields/*.py`` and
``srt/arg_groups/choices.py``.

A Sphinx "viewcode" page (``<release>/_modules/.../llm_args.html`` of the engine's docs site) is
accepted in place of a ``.py`` file: the highlighted source is turned back into Python first.

A maintainer's script, not part of tuner: it wrote the reference files in
``tuner/serve/engines/data/`` (see the README there) and tests/serve/test_engine_reference_data.py
tests it. It needs only the standard library; from the repository's root:

    python tests/serve/derive_keys.py trtllm --release v1.2.1 --llm-args llm_args.py \
        --serve serve.py --health-path /health \
        -o tuner/serve/engines/data/trtllm-1.2.1-llm_args.json
    python tests/serve/derive_keys.py sglang --release v0.5.23 --health-path /health \
        -o tuner/serve/engines/data/sglang-0.5.23-server_args.json \
        server_args.py arg_groups/fields/*.py arg_groups/choices.py
"""

from __future__ import annotations

import argparse
import ast
import html
import json
import re
import sys
from pathlib import Path

_CONFIG_BASES = {"BaseModel", "StrictBaseModel"}
_ENUM_BASES = {"Enum", "StrEnum", "IntEnum"}


def read_source(path: str | Path) -> str:
    """The Python text of ``path``; a Sphinx viewcode ``.html`` page is converted back to source."""
    text = Path(path).read_text(encoding="utf-8")
    if not str(path).endswith(".html"):
        return text
    match = re.search(r'<div class="highlight"><pre>(.*?)</pre></div>', text, re.S)
    if match is None:
        raise ValueError(f"{path}: no highlighted source block")
    code = re.sub(r'<a class="viewcode-back"[^>]*>.*?</a>', "", match.group(1), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", code))


def _names(node: ast.AST | None) -> list[str]:
    return [] if node is None else [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def _literal_values(node: ast.AST | None) -> list | None:
    """Values of the first ``Literal[...]`` inside an annotation."""
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Subscript) and getattr(sub.value, "id", None) == "Literal":
            elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            return [ast.literal_eval(e) for e in elts]
    return None


def _kw(call: ast.AST | None, name: str) -> ast.AST | None:
    if isinstance(call, ast.Call):
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
    return None


# --------------------------------------------------------------------------- TensorRT-LLM


class _Module:
    def __init__(self, source: str):
        self.tree = ast.parse(source)
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.aliases = {}  # module-level `Name: TypeAlias = ...` / `Name = Union[...]`
        for n in self.tree.body:
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
                self.aliases[n.target.id] = n.value

    def bases(self, name: str) -> list[str]:
        cls = self.classes.get(name)
        return [] if cls is None else [b.id for b in cls.bases if isinstance(b, ast.Name)]

    def mro(self, name: str) -> list[str]:
        """The class and its in-module ancestors, ancestors first (pydantic field order)."""
        out: list[str] = []
        for base in self.bases(name):
            for anc in self.mro(base):
                if anc not in out:
                    out.append(anc)
        return out + ([name] if name in self.classes else [])

    def is_config(self, name: str) -> bool:
        return name in self.classes and any(
            b in _CONFIG_BASES for c in self.mro(name) for b in self.bases(c) + [c]
        )

    def is_enum(self, name: str) -> bool:
        return name in self.classes and any(b in _ENUM_BASES for b in self.bases(name))

    def fields(self, name: str) -> dict[str, ast.AnnAssign]:
        """Public pydantic fields (ClassVar and private attributes excluded), bases first."""
        out: dict[str, ast.AnnAssign] = {}
        for cls in self.mro(name):
            for node in self.classes[cls].body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                if node.target.id.startswith("_") or "ClassVar" in _names(node.annotation):
                    continue
                out[node.target.id] = node
        return out

    def keys(self, name: str) -> list[str]:
        """Field names plus the extra names a field accepts (``validation_alias=AliasChoices``)."""
        out: list[str] = []
        for field, node in self.fields(name).items():
            out.append(field)
            alias = _kw(node.value, "validation_alias")
            if isinstance(alias, ast.Call):
                out += [a.value for a in alias.args if isinstance(a, ast.Constant)]
        return list(dict.fromkeys(out))

    def enum_values(self, name: str) -> list:
        vals = []
        for node in self.classes[name].body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                v = node.value
                is_str = isinstance(v, ast.Constant) and isinstance(v.value, str)
                vals.append(v.value if is_str else node.targets[0].id)
        return vals

    def config_types(self, annotation: ast.AST) -> list[str]:
        names = _names(annotation)
        for n in list(names):
            if n in self.aliases:
                names += _names(self.aliases[n])
        return list(dict.fromkeys(n for n in names if self.is_config(n)))

    def dispatch(self, classes: list[str]) -> tuple[str | None, dict[str, str]]:
        """``(key, {value: class})`` of a ``from_dict`` that maps a dict key to subclasses."""
        for cls in {a for c in classes for a in self.mro(c)}:
            for fn in self.classes[cls].body:
                if not (isinstance(fn, ast.FunctionDef) and fn.name == "from_dict"):
                    continue
                table, key = {}, None
                for node in ast.walk(fn):
                    if (
                        isinstance(node, ast.Assign)
                        and isinstance(node.value, ast.Dict)
                        and getattr(node.targets[0], "id", "") == "config_classes"
                    ):
                        pairs = zip(node.value.keys, node.value.values, strict=True)
                        table = {k.value: v.id for k, v in pairs}
                    if (
                        isinstance(node, ast.Call)
                        and getattr(node.func, "attr", "") == "get"
                        and node.args
                        and isinstance(node.args[0], ast.Constant)
                    ):
                        key = node.args[0].value
                if table:
                    return key, table
        return None, {}


def derive_llm_args(source: str, root: str = "TorchLlmArgs") -> dict:
    mod = _Module(source)
    if root not in mod.classes:
        raise ValueError(f"class {root} not found")
    nested: dict[str, list[str]] = {}
    enums: dict[str, list] = {}
    dispatch: dict[str, dict] = {}

    def visit(cls: str, prefix: str, depth: int) -> None:
        for field, node in mod.fields(cls).items():
            path = prefix + field
            values = _literal_values(node.annotation)
            if values is not None:
                enums[path] = values
            enum_types = [n for n in _names(node.annotation) if mod.is_enum(n)]
            if enum_types:
                enums[path] = mod.enum_values(enum_types[0])
            types = mod.config_types(node.annotation)
            if not types or depth > 2:
                continue
            if len(types) == 1:
                nested[path] = mod.keys(types[0])
                visit(types[0], path + ".", depth + 1)
                continue
            key, table = mod.dispatch(types)
            by_class = {c: v for v, c in table.items()}
            if key:
                dispatch[path] = {"key": key, "values": list(table)}
                enums[f"{path}.{key}"] = list(table)
            for t in types:
                sub = f"{path}.{by_class.get(t, t)}"
                nested[sub] = mod.keys(t)
                visit(t, sub + ".", depth + 1)

    visit(root, "", 0)
    return {
        "top_level_keys": mod.keys(root),
        "nested": nested,
        "enums": enums,
        "dispatch": dispatch,
        "bases": mod.mro(root),
    }


def _string_args(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def _choice_list(node: ast.AST | None) -> list | None:
    """Literal choices of ``click.Choice([...])`` / ``SomeChoice([...], ...)`` / a list literal."""
    if isinstance(node, ast.Call) and node.args:
        node = node.args[0]
    if isinstance(node, (ast.List, ast.Tuple)):
        try:
            return [ast.literal_eval(e) for e in node.elts]
        except ValueError:
            return None
    return None


def derive_click_command(source: str, command: str = "serve") -> dict:
    """Options (with aliases) and literal choices of the click command named ``command``."""
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        decos = [d for d in fn.decorator_list if isinstance(d, ast.Call)]
        if not any(
            getattr(d.func, "attr", "") == "command" and _string_args(d) == [command] for d in decos
        ):
            continue
        groups, choices = [], {}
        for d in reversed(decos):  # click applies bottom-up; keep source order
            if getattr(d.func, "attr", "") != "option":
                continue
            opts = [s for s in _string_args(d) if s.startswith("-")]
            groups.insert(0, opts)
            values = _choice_list(_kw(d, "type"))
            if values is not None:
                choices[opts[0]] = values
        return {
            "options": [o for g in groups for o in g],
            "option_groups": groups,
            "choices": choices,
        }
    raise ValueError(f"click command {command!r} not found")


def derive_trtllm(args: argparse.Namespace) -> dict:
    out = {
        "release": args.release,
        "source": f"NVIDIA/TensorRT-LLM {args.release} tensorrt_llm/llmapi/llm_args.py"
        + (" + tensorrt_llm/commands/serve.py" if args.serve else ""),
        "derived_by": args.derived_by,
    }
    out.update(derive_llm_args(read_source(args.llm_args)))
    if args.serve:
        serve = derive_click_command(read_source(args.serve))
        out["serve_cli_options"] = serve["options"]
        out["serve_cli_option_groups"] = serve["option_groups"]
        out["serve_cli_choices"] = serve["choices"]
    out["health_path"] = args.health_path
    return out


# --------------------------------------------------------------------------- SGLang


def _module_constants(trees: list[ast.Module]) -> dict[str, list]:
    consts: dict[str, list] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                values = _eval_choices(node.value, consts)
                if values is not None:
                    consts[node.targets[0].id] = values
    return consts


def _eval_choices(node: ast.AST | None, consts: dict[str, list]) -> list | None:
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _eval_choices(node.left, consts), _eval_choices(node.right, consts)
        return None if left is None or right is None else left + right
    return _choice_list(node) if isinstance(node, (ast.List, ast.Tuple)) else None


def derive_sglang(sources: list[str]) -> dict:
    trees = [ast.parse(s) for s in sources]
    consts = _module_constants(trees)
    flags: list[str] = []
    choices: dict[str, list] = {}
    dynamic: list[str] = []  # flags whose choices are computed at run time
    for tree in trees:
        for node in ast.walk(tree):
            # (1) parser.add_argument("--flag", "--alias", choices=[...]) calls
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                names = [s for s in _string_args(node) if s.startswith("--")]
                flags += names + _negations(names, _kw(node, "action"))
                _record_choices(names, _kw(node, "choices"), None, consts, choices, dynamic)
            # (2) field: A[T, "help"] / A[T, Arg(help=..., cli_name=..., aliases=[...])]
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if not (
                isinstance(ann, ast.Subscript)
                and getattr(ann.value, "id", "") in ("A", "Annotated")
                and isinstance(ann.slice, ast.Tuple)
            ):
                continue
            meta = ann.slice.elts[1:]
            arg = next(
                (m for m in meta if isinstance(m, ast.Call) and getattr(m.func, "id", "") == "Arg"),
                None,
            )
            if arg is None and not any(
                isinstance(m, ast.Constant) and isinstance(m.value, str) for m in meta
            ):
                continue
            if arg is not None:
                no_cli = _kw(arg, "no_cli")
                if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                    continue
            cli = _kw(arg, "cli_name")
            name = (
                cli.value
                if isinstance(cli, ast.Constant)
                else ("--" + node.target.id.replace("_", "-"))
            )
            names = [name, *(_choice_list(_kw(arg, "aliases")) or [])]
            flags += names + _negations(names, _kw(arg, "action"))
            _record_choices(names, _kw(arg, "choices"), ann.slice.elts[0], consts, choices, dynamic)
    return {
        "flags": list(dict.fromkeys(flags)),
        "choices": choices,
        "choices_not_literal": sorted(set(dynamic) - set(choices)),
    }


def _negations(names: list[str], action: ast.AST | None) -> list[str]:
    """``argparse.BooleanOptionalAction`` also registers ``--no-<flag>``."""
    is_bool_opt = getattr(action, "attr", getattr(action, "id", "")) == "BooleanOptionalAction"
    return ["--no-" + n[2:] for n in names if n.startswith("--")] if is_bool_opt else []


def _record_choices(names, choices_node, annotation, consts, choices, dynamic) -> None:
    values = _eval_choices(choices_node, consts)
    if values is None and choices_node is None:
        values = _literal_values(annotation)
    if names and values is not None:
        choices[names[0]] = values
    elif names and choices_node is not None:
        dynamic.append(names[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="engine", required=True)
    trt = sub.add_parser("trtllm")
    trt.add_argument("--llm-args", required=True)
    trt.add_argument("--serve")
    sgl = sub.add_parser("sglang")
    sgl.add_argument("sources", nargs="+", help="server_args.py [arg_groups/fields/*.py ...]")
    for p in (trt, sgl):
        p.add_argument("--release", required=True)
        p.add_argument("--health-path", default="/health")
        p.add_argument("--derived-by", default="tests/serve/derive_keys.py (ast)")
        p.add_argument("--note", action="append", default=[], help="recorded under 'notes'")
        p.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    if args.engine == "trtllm":
        out = derive_trtllm(args)
    else:
        out = {
            "release": args.release,
            "source": f"sgl-project/sglang {args.release} python/sglang/srt/server_args.py"
            + (" + srt/arg_groups/" if len(args.sources) > 1 else ""),
            "derived_by": args.derived_by,
        }
        out.update(derive_sglang([read_source(s) for s in args.sources]))
        out["health_path"] = args.health_path
    if args.note:
        out["notes"] = args.note
    text = json.dumps(out, indent=1) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
