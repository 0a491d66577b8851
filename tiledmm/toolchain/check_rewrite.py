"""Check mode's rewriting of a user kernel's source (emulator only): pointer, vector pointer,
array and `T **` parameters become bounds-checked `tm_checked_ptr<T>` / `tm_checked_arr<T, N>` /
`tm_checked_rows<T>`, `__shared__` arrays and scalars of number types become
race-checked `tm_sh_array` / `tm_sh_scalar` (tiledmm/native/tiledmm_kernel.h), on the same
lines so that diagnostics keep the user's line numbers."""
import re

from .source import apply_edits, blank_source, split_top_level


def checked_source(source, params):
    """The source with the kernel's array parameters declared as their checked types
    (checked_type) and every
    `reinterpret_cast<` / `const_cast<` spelled `tm_check_reinterpret<` / `tm_check_const_cast<`
    (a checked pointer cast to another pointer type stays checked; anything else is cast as
    before), on the same lines, so that diagnostics keep the user's line numbers."""
    out = source
    for p in sorted(params, key=lambda p: -p.span[0]):
        t = checked_type(p)
        if t:
            lines = "\n" * source.count("\n", *p.span)
            out = out[:p.span[0]] + f" {t} {p.name}{lines}" + out[p.span[1]:]
    return checked_casts(out)


def checked_type(p):
    """The check-mode type of a kernel parameter (tiledmm_kernel.h), None for a number:
    `float *` -> tm_checked_ptr<float>, `float4 *` -> tm_checked_ptr<float4>,
    `float A[][64]` -> tm_checked_arr<float, 64>, `float **` -> tm_checked_rows<float>."""
    c = "const " if p.const else ""
    if p.kind == "pointer":
        return f"tm_checked_ptr<{c}{p.ctype}>"
    if p.kind == "vector":
        return f"tm_checked_ptr<{c}{p.vector}>"
    if p.kind == "array":
        return f"tm_checked_arr<{c}{p.ctype}, {', '.join(f'{d}LL' for d in p.inner)}>"
    if p.kind == "rows":
        return f"tm_checked_rows<{c}{p.ctype}>"
    return None


_CAST_RE = re.compile(r"(?<![\w])(reinterpret_cast|const_cast)(?=\s*<)")
_CHECKED_CAST = {"reinterpret_cast": "tm_check_reinterpret", "const_cast": "tm_check_const_cast"}


def checked_casts(source):
    """`reinterpret_cast<` and `const_cast<` (outside comments and literals) become
    `tm_check_reinterpret<` and `tm_check_const_cast<` (tiledmm_kernel.h): the same casts,
    except that a checked pointer stays checked (C++ applies no conversion of a class object
    inside these two casts, so without this they would not compile in check mode)."""
    blank = blank_source(source)
    out = source
    for m in reversed(list(_CAST_RE.finditer(blank))):
        out = out[:m.start()] + _CHECKED_CAST[m.group(1)] + out[m.end():]
    return out


_NUMBER_WORDS = ("unsigned", "signed", "short", "long", "int", "char", "float", "double", "bool",
                 "size_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t",
                 "int64_t", "uint64_t")
_SHARED_RE = re.compile(
    r"(?<![\w])__shared__(?P<quals>(?:\s+(?:__align__\s*\(\s*\w+\s*\)|volatile))*)\s+"
    r"(?P<type>(?:(?:" + "|".join(_NUMBER_WORDS) + r")\b\s*)+)(?P<decls>[^;{}]*);")
_DECLARATOR_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]+\]\s*)*)")


def checked_shared(source):
    """Check mode: `__shared__ T name[D1][D2]...;` (T a number type; several declarators too)
    becomes a race-checked tm_sh_array (tiledmm_kernel.h), `__shared__ T name;` a tm_sh_scalar,
    on the same lines. Other shared declarations (extern, struct types, initialisers) stay as
    they are."""
    blank = blank_source(source)
    edits = []
    for m in _SHARED_RE.finditer(blank):
        if re.search(r"\bextern\s*$", blank[:m.start()]):
            continue
        ctype = " ".join(m.group("type").split())
        quals = " ".join(q for q in m.group("quals").split() if q != "volatile")
        pieces = []
        for decl in split_top_level(m.group("decls")):
            d = _DECLARATOR_RE.fullmatch(decl)
            if not d:
                pieces = None
                break
            name, dims = d.group(1), re.findall(r"\[([^\[\]]+)\]", d.group(2))
            tag = f"tm_shn_{name}"
            if dims:
                kind = f"tm_sh_array<{ctype}, {tag}, " + ", ".join(
                    f"(long long)({' '.join(x.split())})" for x in dims) + ">"
            else:
                kind = f"tm_sh_scalar<{ctype}, {tag}>"
            pieces.append(f"struct {tag} {{ static constexpr const char *name() {{ return "
                          f"\"{name}\"; }} }}; __shared__ {quals + ' ' if quals else ''}"
                          f"{kind} {name};")
        if not pieces:
            continue
        text = " ".join(pieces) + "\n" * source.count("\n", m.start(), m.end())
        edits.append((m.start(), m.end(), text))
    return apply_edits(source, edits)
