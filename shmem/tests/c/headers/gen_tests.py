#!/usr/bin/env python3
"""Generate the C test sources of check.sh from the OpenSHMEM 1.5 symbol table.

Inputs: docs/spec/openshmem-1.5-c-symbols.tsv, gsas-beyond-1.5-c-symbols.tsv (the routines
gsas declares besides: shmem_team_ptr, ibput and ibget of 1.6 and the cache routines 1.5
removed), openshmem-1.5-c11-generics.txt and gsas-beyond-1.5-c11-generics.txt (the generic
names, the contract: 1.5's and shmem_ibput, shmem_ibget of 1.6), and signatures.tsv next to this file (the 1.5 signature of every family template,
written independently of shmem.h).  The type lists and the generic-name table below are a
second transcription of the specification tables, also independent of shmem.h.

Outputs, in OUT_DIR:
  symbols.txt       every symbol of the TSV, then every pshmem_ twin (one per line)
  generics.txt      the 73 generic names (67 of 1.5, the 6 of 1.6)
  decls.c           redeclares every symbol and twin with its 1.5 signature and takes its
                    address (compiles as C and as C++): a missing or different prototype in
                    the headers is a compile error
  stubs.c           a definition of every symbol and twin that records its own name, plus
                    the handle objects; lets the dispatch tests link and run
  generics.c        calls every generic with every type of its table (and with a leading
                    context where allowed), checks at run time which routine was selected and
                    at compile time the type of the result
  neg_*.c           calls with an unsupported type; each must fail to compile

Usage: gen_tests.py REPO_ROOT OUT_DIR
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ----------------------------------------------------------------------------------------
# Type lists of the specification (checklist section 1.1), TYPENAME -> C type.
# ----------------------------------------------------------------------------------------
CTYPE = {
    "float": "float", "double": "double", "longdouble": "long double", "char": "char",
    "schar": "signed char", "short": "short", "int": "int", "long": "long",
    "longlong": "long long", "uchar": "unsigned char", "ushort": "unsigned short",
    "uint": "unsigned int", "ulong": "unsigned long", "ulonglong": "unsigned long long",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "size": "size_t", "ptrdiff": "ptrdiff_t", "complexd": "double _Complex",
    "complexf": "float _Complex",
}
RMA = ["float", "double", "longdouble", "char", "schar", "short", "int", "long", "longlong",
       "uchar", "ushort", "uint", "ulong", "ulonglong", "int8", "int16", "int32", "int64",
       "uint8", "uint16", "uint32", "uint64", "size", "ptrdiff"]
AMO_STD = ["int", "long", "longlong", "uint", "ulong", "ulonglong", "int32", "int64",
           "uint32", "uint64", "size", "ptrdiff"]
AMO_EXT = ["float", "double"] + AMO_STD
AMO_BIT = ["uint", "ulong", "ulonglong", "int32", "int64", "uint32", "uint64"]
P2P = AMO_STD
P2P_WITH_DEPRECATED = AMO_STD + ["short", "ushort"]
TEAM_BIT = ["uchar", "ushort", "uint", "ulong", "ulonglong", "int8", "int16", "int32",
            "int64", "uint8", "uint16", "uint32", "uint64", "size"]
TEAM_MINMAX = RMA
TEAM_ARITH = RMA + ["complexd", "complexf"]

# The LP64 Linux typedefs (x86_64 and aarch64): the basic type each one names.
LP64_ALIAS = {
    "int8": "schar", "int16": "short", "int32": "int", "int64": "long", "uint8": "uchar",
    "uint16": "ushort", "uint32": "uint", "uint64": "ulong", "size": "ulong",
    "ptrdiff": "long",
}

# ----------------------------------------------------------------------------------------
# The generic names: (name, type list, routine suffix, context allowed, argument pattern,
# result type or None for void).  Patterns: {D} a TYPE array, {S} another TYPE array, {C} a
# const TYPE array, {V} a TYPE value.  Result "T" means TYPE.
# ----------------------------------------------------------------------------------------
TEAM = "SHMEM_TEAM_WORLD"
SIG = "&sig, 1, SHMEM_SIGNAL_SET, 0"
GENERICS = [
    ("shmem_put", RMA, "_put", True, "{D}, {S}, 1, 0", None),
    ("shmem_p", RMA, "_p", True, "{D}, {V}, 0", None),
    ("shmem_iput", RMA, "_iput", True, "{D}, {S}, 1, 1, 1, 0", None),
    ("shmem_get", RMA, "_get", True, "{D}, {S}, 1, 0", None),
    ("shmem_g", RMA, "_g", True, "{C}, 0", "T"),
    ("shmem_g", RMA, "_g", True, "{S}, 0", "T"),
    ("shmem_iget", RMA, "_iget", True, "{D}, {S}, 1, 1, 1, 0", None),
    ("shmem_ibput", RMA, "_ibput", True, "{D}, {S}, 1, 1, 1, 1, 0", None),
    ("shmem_ibget", RMA, "_ibget", True, "{D}, {S}, 1, 1, 1, 1, 0", None),
    ("shmem_put_nbi", RMA, "_put_nbi", True, "{D}, {S}, 1, 0", None),
    ("shmem_get_nbi", RMA, "_get_nbi", True, "{D}, {S}, 1, 0", None),
    ("shmem_atomic_fetch", AMO_EXT, "_atomic_fetch", True, "{C}, 0", "T"),
    ("shmem_atomic_fetch", AMO_EXT, "_atomic_fetch", True, "{S}, 0", "T"),
    ("shmem_fetch", AMO_EXT, "_atomic_fetch", False, "{C}, 0", "T"),
    ("shmem_atomic_set", AMO_EXT, "_atomic_set", True, "{D}, {V}, 0", None),
    ("shmem_set", AMO_EXT, "_atomic_set", False, "{D}, {V}, 0", None),
    ("shmem_atomic_compare_swap", AMO_STD, "_atomic_compare_swap", True, "{D}, {V}, {V}, 0",
     "T"),
    ("shmem_cswap", AMO_STD, "_atomic_compare_swap", False, "{D}, {V}, {V}, 0", "T"),
    ("shmem_atomic_swap", AMO_EXT, "_atomic_swap", True, "{D}, {V}, 0", "T"),
    ("shmem_swap", AMO_EXT, "_atomic_swap", False, "{D}, {V}, 0", "T"),
    ("shmem_atomic_fetch_inc", AMO_STD, "_atomic_fetch_inc", True, "{D}, 0", "T"),
    ("shmem_finc", AMO_STD, "_atomic_fetch_inc", False, "{D}, 0", "T"),
    ("shmem_atomic_inc", AMO_STD, "_atomic_inc", True, "{D}, 0", None),
    ("shmem_inc", AMO_STD, "_atomic_inc", False, "{D}, 0", None),
    ("shmem_atomic_fetch_add", AMO_STD, "_atomic_fetch_add", True, "{D}, {V}, 0", "T"),
    ("shmem_fadd", AMO_STD, "_atomic_fetch_add", False, "{D}, {V}, 0", "T"),
    ("shmem_atomic_add", AMO_STD, "_atomic_add", True, "{D}, {V}, 0", None),
    ("shmem_add", AMO_STD, "_atomic_add", False, "{D}, {V}, 0", None),
    ("shmem_atomic_fetch_and", AMO_BIT, "_atomic_fetch_and", True, "{D}, {V}, 0", "T"),
    ("shmem_atomic_and", AMO_BIT, "_atomic_and", True, "{D}, {V}, 0", None),
    ("shmem_atomic_fetch_or", AMO_BIT, "_atomic_fetch_or", True, "{D}, {V}, 0", "T"),
    ("shmem_atomic_or", AMO_BIT, "_atomic_or", True, "{D}, {V}, 0", None),
    ("shmem_atomic_fetch_xor", AMO_BIT, "_atomic_fetch_xor", True, "{D}, {V}, 0", "T"),
    ("shmem_atomic_xor", AMO_BIT, "_atomic_xor", True, "{D}, {V}, 0", None),
    ("shmem_atomic_fetch_nbi", AMO_EXT, "_atomic_fetch_nbi", True, "{D}, {C}, 0", None),
    ("shmem_atomic_compare_swap_nbi", AMO_STD, "_atomic_compare_swap_nbi", True,
     "{D}, {S}, {V}, {V}, 0", None),
    ("shmem_atomic_swap_nbi", AMO_EXT, "_atomic_swap_nbi", True, "{D}, {S}, {V}, 0", None),
    ("shmem_atomic_fetch_inc_nbi", AMO_STD, "_atomic_fetch_inc_nbi", True, "{D}, {S}, 0",
     None),
    ("shmem_atomic_fetch_add_nbi", AMO_STD, "_atomic_fetch_add_nbi", True,
     "{D}, {S}, {V}, 0", None),
    ("shmem_atomic_fetch_and_nbi", AMO_BIT, "_atomic_fetch_and_nbi", True,
     "{D}, {S}, {V}, 0", None),
    ("shmem_atomic_fetch_or_nbi", AMO_BIT, "_atomic_fetch_or_nbi", True, "{D}, {S}, {V}, 0",
     None),
    ("shmem_atomic_fetch_xor_nbi", AMO_BIT, "_atomic_fetch_xor_nbi", True,
     "{D}, {S}, {V}, 0", None),
    ("shmem_put_signal", RMA, "_put_signal", True, "{D}, {S}, 1, " + SIG, None),
    ("shmem_put_signal_nbi", RMA, "_put_signal_nbi", True, "{D}, {S}, 1, " + SIG, None),
    ("shmem_alltoall", RMA, "_alltoall", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_alltoalls", RMA, "_alltoalls", False, TEAM + ", {D}, {S}, 1, 1, 1", "int"),
    ("shmem_broadcast", RMA, "_broadcast", False, TEAM + ", {D}, {S}, 1, 0", "int"),
    ("shmem_collect", RMA, "_collect", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_fcollect", RMA, "_fcollect", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_and_reduce", TEAM_BIT, "_and_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_or_reduce", TEAM_BIT, "_or_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_xor_reduce", TEAM_BIT, "_xor_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_max_reduce", TEAM_MINMAX, "_max_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_min_reduce", TEAM_MINMAX, "_min_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_sum_reduce", TEAM_ARITH, "_sum_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_sum_inscan", TEAM_ARITH, "_sum_inscan", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_sum_exscan", TEAM_ARITH, "_sum_exscan", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_prod_reduce", TEAM_ARITH, "_prod_reduce", False, TEAM + ", {D}, {S}, 1", "int"),
    ("shmem_wait_until", P2P_WITH_DEPRECATED, "_wait_until", False, "{D}, SHMEM_CMP_EQ, {V}",
     None),
    ("shmem_wait_until_all", P2P_WITH_DEPRECATED, "_wait_until_all", False,
     "{D}, 1, status, SHMEM_CMP_EQ, {V}", None),
    ("shmem_wait_until_any", P2P_WITH_DEPRECATED, "_wait_until_any", False,
     "{D}, 1, status, SHMEM_CMP_EQ, {V}", "size_t"),
    ("shmem_wait_until_some", P2P_WITH_DEPRECATED, "_wait_until_some", False,
     "{D}, 1, indices, status, SHMEM_CMP_EQ, {V}", "size_t"),
    ("shmem_wait_until_all_vector", P2P, "_wait_until_all_vector", False,
     "{D}, 1, status, SHMEM_CMP_EQ, {S}", None),
    ("shmem_wait_until_any_vector", P2P, "_wait_until_any_vector", False,
     "{D}, 1, status, SHMEM_CMP_EQ, {S}", "size_t"),
    ("shmem_wait_until_some_vector", P2P, "_wait_until_some_vector", False,
     "{D}, 1, indices, status, SHMEM_CMP_EQ, {S}", "size_t"),
    ("shmem_test", P2P_WITH_DEPRECATED, "_test", False, "{D}, SHMEM_CMP_EQ, {V}", "int"),
    ("shmem_test_all", P2P_WITH_DEPRECATED, "_test_all", False, "{D}, 1, status, SHMEM_CMP_EQ, {V}", "int"),
    ("shmem_test_any", P2P_WITH_DEPRECATED, "_test_any", False, "{D}, 1, status, SHMEM_CMP_EQ, {V}",
     "size_t"),
    ("shmem_test_some", P2P_WITH_DEPRECATED, "_test_some", False,
     "{D}, 1, indices, status, SHMEM_CMP_EQ, {V}", "size_t"),
    ("shmem_test_all_vector", P2P, "_test_all_vector", False,
     "{D}, 1, status, SHMEM_CMP_EQ, {S}", "int"),
    ("shmem_test_any_vector", P2P, "_test_any_vector", False,
     "{D}, 1, status, SHMEM_CMP_EQ, {S}", "size_t"),
    ("shmem_test_some_vector", P2P, "_test_some_vector", False,
     "{D}, 1, indices, status, SHMEM_CMP_EQ, {S}", "size_t"),
]
# shmem_sync and the 1.6 signal routines have no type table; generics.c checks them
# separately.
SPECIAL_GENERICS = ["shmem_sync", "shmem_signal_add", "shmem_signal_set"]

# Calls with a type outside the table: each must be a compile error naming the default arm.
NEGATIVE = {
    "amo_add_double": "double x = 0; shmem_atomic_add(&x, 1.0, 0);",
    "put_struct": "struct pair { int a, b; } d[2], s[2]; shmem_put(d, s, 2, 0);",
    "and_reduce_longlong": "long long d[2], s[2] = {0, 0};"
                           " shmem_and_reduce(SHMEM_TEAM_WORLD, d, s, 2);",
    "ctx_p_bool": "_Bool b = 0; shmem_p(SHMEM_CTX_DEFAULT, &b, 1, 0);",
    "wait_until_double": "double x = 0; shmem_wait_until(&x, SHMEM_CMP_EQ, 1.0);",
    "xor_longlong": "long long x = 0; shmem_atomic_xor(&x, 1LL, 0);",
    "deprecated_generic_with_ctx": "int x = 0; shmem_fetch(SHMEM_CTX_DEFAULT, &x, 0);",
    "sum_reduce_pointer": "int *d[2], *s[2] = {0, 0};"
                          " shmem_sum_reduce(SHMEM_TEAM_WORLD, d, s, 2);",
    "wait_until_all_char": "signed char v[2] = {0, 0};"
                           " shmem_wait_until_all(v, 2, NULL, SHMEM_CMP_EQ, 0);",
}
NO_MATCH = "gsas_shmem_generic_called_with_unsupported_argument_type"


def die(msg):
    sys.stderr.write("gen_tests.py: " + msg + "\n")
    sys.exit(1)


def read_symbols(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:6] != ["symbol", "family_template", "category", "deprecated",
                          "ctx_variant", "c_type"]:
            die("unexpected header in %s: %r" % (path, header))
        for lineno, line in enumerate(f, start=2):
            line = line.rstrip("\n")
            if not line:
                continue
            cols = line.split("\t")
            if len(cols) < 6:
                cols += [""] * (6 - len(cols))
            sym, tmpl, _cat, _dep, ctx, ctype = cols[:6]
            rows.append((sym, tmpl, ctx == "1", " ".join(ctype.split()), lineno))
    return rows


def read_signatures(path):
    sigs = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            tmpl, ret, params = line.split("\t")
            if tmpl in sigs:
                die("duplicate signature for " + tmpl)
            sigs[tmpl] = (ret, params)
    return sigs


def signature_of(sym, tmpl, is_ctx, ctype, sigs):
    """(return type, parameter list) of one symbol."""
    if is_ctx:
        base = re.sub(r"^shmem_ctx_", "shmem_", tmpl)
        if base not in sigs:
            die("no signature for the base %s of %s" % (base, sym))
        ret, params = sigs[base]
        params = "shmem_ctx_t ctx" if params == "void" else "shmem_ctx_t ctx, " + params
    else:
        if tmpl not in sigs:
            die("no signature for family " + tmpl + " (" + sym + ")")
        ret, params = sigs[tmpl]
    if "TYPE" in ret + params:
        if not ctype:
            die(sym + " has a typed signature but no C type in the TSV")
        ret = re.sub(r"\bTYPE\b", ctype, ret)
        params = re.sub(r"\bTYPE\b", ctype, params)
    return ret, params


def profiling_name(sym):
    return "p" + sym


def canonical(typename):
    return LP64_ALIAS.get(typename, typename)


def selected_typename(typename, table):
    """The row of `table` whose routine a call with `typename` must select on LP64 Linux."""
    if canonical(typename) in table:
        return canonical(typename)
    same = [t for t in table if canonical(t) == canonical(typename)]
    if len(same) != 1:
        die("ambiguous row for %s in %r" % (typename, table))
    return same[0]


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def gen_decls(symbols):
    out = ["/* Generated by gen_tests.py: redeclare and take the address of every symbol. */",
           "/* Taking the address of the deprecated cache routines is no call: no warning. */",
           '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"',
           "#include <shmem.h>", "#include <pshmem.h>", "",
           "#ifdef __cplusplus", 'extern "C" {', "#endif"]
    for name, ret, params in symbols:
        out.append("%s (%s)(%s);" % (ret, name, params))
    out += ["#ifdef __cplusplus", "}", "#endif", "",
            "typedef void (*gsas_any_fn)(void);",
            "extern const gsas_any_fn gsas_every_symbol[];",
            "const gsas_any_fn gsas_every_symbol[] = {"]
    for name, _ret, _params in symbols:
        out.append("    (gsas_any_fn)&(%s)," % name)
    out += ["};", ""]
    return "\n".join(out)


def gen_stubs(symbols):
    out = ["/* Generated by gen_tests.py: every routine records its name and returns zero. */",
           "#include <stdlib.h>", "#include <shmem.h>", "#include <pshmem.h>",
           '#include "stub_record.h"', "",
           "struct shmem_impl_ctx { int unused; };",
           "struct shmem_impl_team { int unused; };",
           "struct shmem_impl_ctx gsas_shmem_ctx_default;",
           "struct shmem_impl_team gsas_shmem_team_world;",
           "struct shmem_impl_team gsas_shmem_team_shared;",
           "const char *gsas_stub_last;", ""]
    for name, ret, params in symbols:
        body = 'gsas_stub_last = "%s";' % name
        if name.endswith("global_exit"):
            body += " exit(status);"
        elif ret != "void":
            body += " return (%s)0;" % ret
        out.append("%s (%s)(%s) { %s }" % (ret, name, params, body))
    out.append("")
    return "\n".join(out)


def gen_generics():
    used = sorted({t for g in GENERICS for t in g[1]}, key=list(CTYPE).index)
    out = ["/* Generated by gen_tests.py: every generic with every type of its table. */",
           "#include <stdio.h>", "#include <string.h>", "#include <shmem.h>",
           '#include "stub_record.h"', "",
           "static int checks, failures;", "",
           "static void expect(const char *want, const char *call, int line)",
           "{",
           "    checks++;",
           "    if (gsas_stub_last == NULL || strcmp(gsas_stub_last, want) != 0) {",
           "        failures++;",
           '        fprintf(stderr, "generics.c:%d: %s called %s, expected %s\\n", line, call,',
           '                gsas_stub_last ? gsas_stub_last : "nothing", want);',
           "    }",
           "}", "",
           "#define EXPECT(want, call)                                                   \\",
           "    do {                                                                     \\",
           "        gsas_stub_last = NULL;                                               \\",
           "        (void)(call);                                                        \\",
           "        expect(want, #call, __LINE__);                                       \\",
           "    } while (0)",
           "#define RESULT_IS(call, type) _Static_assert(_Generic((call), type: 1, default: 0),"
           " #call \" does not return \" #type)", ""]
    # Declare only the variables some call uses (-Wunused-variable is an error).
    placeholders = {"D": "d_%s[4]", "S": "s_%s[4]", "V": "v_%s"}
    for t in used:
        patterns = " ".join(g[4] for g in GENERICS if t in g[1])
        names = [placeholders[k] % t for k in "DSV" if "{%s}" % k in patterns]
        out.append("static %s %s;" % (CTYPE[t], ", ".join(names)))
        if "{C}" in patterns:
            out.append("static const %s c_%s[4];" % (CTYPE[t], t))
    out += ["static uint64_t sig;", "static const int status[4];", "static size_t indices[4];",
            "static long psync[SHMEM_BARRIER_SYNC_SIZE];", "",
            "int main(void)", "{",
            "    shmem_ctx_t ctx = SHMEM_CTX_DEFAULT;"]
    for name, table, suffix, ctx_ok, pattern, result in GENERICS:
        for t in table:
            args = pattern.format(D="d_" + t, S="s_" + t, C="c_" + t, V="v_" + t)
            sel = selected_typename(t, table)
            forms = [("shmem_", args)]
            if ctx_ok:
                forms.append(("shmem_ctx_", "ctx, " + args))
            for prefix, a in forms:
                call = "%s(%s)" % (name, a)
                out.append('    EXPECT("%s%s%s", %s);' % (prefix, sel, suffix, call))
                if result is not None:
                    rtype = CTYPE[t] if result == "T" else result
                    out.append("    RESULT_IS(%s, %s);" % (call, rtype))
    out += [
        "",
        "    /* shmem_sync: a team selects shmem_team_sync, the active set the C routine. */",
        '    EXPECT("shmem_team_sync", shmem_sync(SHMEM_TEAM_WORLD));',
        "    RESULT_IS(shmem_sync(SHMEM_TEAM_WORLD), int);",
        '    EXPECT("shmem_sync", shmem_sync(0, 0, 1, psync));',
        "    {",
        "        const shmem_team_t team = SHMEM_TEAM_SHARED;",
        '        EXPECT("shmem_team_sync", shmem_sync(team));',
        "    }",
        "    /* shmem_signal_add/set (1.6): a leading context selects the ctx routine. */",
        '    EXPECT("shmem_ctx_signal_add", shmem_signal_add(ctx, &sig, 1, 0));',
        '    EXPECT("shmem_signal_add", shmem_signal_add(&sig, 1, 0));',
        '    EXPECT("shmem_ctx_signal_set", shmem_signal_set(SHMEM_CTX_DEFAULT, &sig, 1, 0));',
        '    EXPECT("shmem_signal_set", shmem_signal_set(&sig, 1, 0));',
        "    /* Qualified and null contexts still select the context form. */",
        "    {",
        "        const shmem_ctx_t cctx = SHMEM_CTX_DEFAULT;",
        '        EXPECT("shmem_ctx_int_put", shmem_put(cctx, d_int, s_int, 1, 0));',
        '        EXPECT("shmem_ctx_long_p", shmem_p(SHMEM_CTX_INVALID, d_long, 1L, 0));',
        "    }",
        "    /* Pointers (not only arrays), and a nested generic call. */",
        "    {",
        "        long *lp = d_long;",
        "        const long *clp = c_long;",
        '        EXPECT("shmem_long_put", shmem_put(lp, clp, 1, 0));',
        '        EXPECT("shmem_long_p", shmem_p(lp, shmem_g(clp, 0), 0));',
        '        EXPECT("shmem_ctx_long_atomic_add",'
        " shmem_atomic_add(ctx, lp, shmem_atomic_fetch(ctx, clp, 0), 0));",
        "    }",
        "    /* Every argument is evaluated exactly once. */",
        "    {",
        "        int k = 0, j = 0;",
        "        shmem_put(&d_int[k++], s_int, 1, 0);",
        "        shmem_p(ctx, &d_int[j++], v_int, 0);",
        "        shmem_atomic_add(&d_long[k++], 1L, 0);",
        "        if (k != 2 || j != 1) {",
        '            fprintf(stderr, "generics.c: arguments evaluated %d and %d times\\n",'
        " k, j);",
        "            failures++;",
        "        }",
        "    }",
        "",
        '    printf("%d dispatch checks, %d failures\\n", checks, failures);',
        "    return failures != 0;",
        "}", ""]
    return "\n".join(out)


def gen_negative(body):
    return "\n".join([
        "/* Generated by gen_tests.py: must not compile. */",
        "#include <stddef.h>", "#include <shmem.h>", "",
        "void negative(void);",
        "void negative(void)", "{", "    " + body, "}", ""])


def main():
    if len(sys.argv) != 3:
        die("usage: gen_tests.py REPO_ROOT OUT_DIR")
    root, out_dir = sys.argv[1], sys.argv[2]
    spec = os.path.join(root, "docs", "spec")
    rows = []
    for table in ("openshmem-1.5-c-symbols.tsv", "gsas-beyond-1.5-c-symbols.tsv"):
        rows += read_symbols(os.path.join(spec, table))
    sigs = read_signatures(os.path.join(HERE, "signatures.tsv"))
    generic_names = []
    for table in ("openshmem-1.5-c11-generics.txt", "gsas-beyond-1.5-c11-generics.txt"):
        with open(os.path.join(spec, table), encoding="utf-8") as f:
            generic_names += [line.strip() for line in f if line.strip()]

    names = [r[0] for r in rows]
    if len(set(names)) != len(names):
        die("duplicate symbols in the TSV")
    used_templates = set()
    symbols = []
    for sym, tmpl, is_ctx, ctype, _lineno in rows:
        ret, params = signature_of(sym, tmpl, is_ctx, ctype, sigs)
        used_templates.add(re.sub(r"^shmem_ctx_", "shmem_", tmpl) if is_ctx else tmpl)
        symbols.append((sym, ret, params))
    unused = sorted(set(sigs) - used_templates)
    if unused:
        die("signatures.tsv lists families that are not in the TSV: " + ", ".join(unused))
    twins = [(profiling_name(s), r, p) for s, r, p in symbols]
    everything = symbols + twins

    covered = {g[0] for g in GENERICS} | set(SPECIAL_GENERICS)
    if covered != set(generic_names):
        die("generic table mismatch: missing %s, extra %s" % (
            sorted(set(generic_names) - covered), sorted(covered - set(generic_names))))

    os.makedirs(out_dir, exist_ok=True)
    write(os.path.join(out_dir, "symbols.txt"), "".join(s[0] + "\n" for s in everything))
    write(os.path.join(out_dir, "generics.txt"), "".join(n + "\n" for n in generic_names))
    write(os.path.join(out_dir, "decls.c"), gen_decls(everything))
    write(os.path.join(out_dir, "stubs.c"), gen_stubs(everything))
    write(os.path.join(out_dir, "generics.c"), gen_generics())
    for name, body in NEGATIVE.items():
        write(os.path.join(out_dir, "neg_%s.c" % name), gen_negative(body))
    print("generated: %d symbols, %d pshmem twins, %d generic names, %d negative cases"
          % (len(symbols), len(twins), len(generic_names), len(NEGATIVE)))


if __name__ == "__main__":
    main()
