"""A quantised KV cache for the independent engine, written from the formats' definitions
(not from KV Scope's code): each record row (one token, one kv head) gets a symmetric
absmax scale, is rounded to int8 or to an fp8 format and read back dequantised, as vLLM's
fp8 cache and llama.cpp's q8_0 cache hand rows to the attention.

fp8 rounding uses frexp: y = m * 2**e with 0.5 <= |m| < 1, so a normal value with M
mantissa bits has spacing 2**(e - 1 - M); below the smallest normal 2**emin the spacing
stays 2**(emin - M) (subnormals). Ties round to even (torch.round), values saturate at the
format's largest finite value.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from torch_model import KVCache

# name -> (mantissa bits, smallest normal exponent, largest finite value); int8: None.
FORMATS: Dict[str, Optional[Tuple[int, int, float]]] = {
    "int8": None,
    "fp8_e4m3": (3, -6, 448.0),
    "fp8_e5m2": (2, -14, 57344.0),
}
INT8_MAX = 127.0


def max_code(fmt: str) -> float:
    spec = FORMATS[fmt]
    return INT8_MAX if spec is None else spec[2]


def round_fp8(y: torch.Tensor, mantissa: int, emin: int, largest: float) -> torch.Tensor:
    _, e = torch.frexp(y)
    spacing = torch.pow(2.0, (torch.clamp(e, min=emin + 1) - 1 - mantissa).to(torch.float32))
    return torch.clamp(torch.round(y / spacing) * spacing, -largest, largest)


def fake_quantize(x: torch.Tensor, fmt: str, scale_factor: float = 1.0,
                  static_scale: Optional[float] = None) -> torch.Tensor:
    """x [..., d] rounded and dequantised, with a scale per row (last axis; symmetric absmax)
    or one `static_scale` (values beyond max_code x scale saturate); `scale_factor` != 1
    dequantises with a wrong scale. Returns x's dtype."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown cache format {fmt!r} (known: {', '.join(FORMATS)})")
    xf = x.to(torch.float32)
    if static_scale is not None:
        scale = torch.tensor(static_scale, dtype=torch.float32)
    else:
        absmax = xf.abs().amax(dim=-1, keepdim=True)
        scale = torch.where(absmax > 0, absmax / max_code(fmt), torch.ones_like(absmax))
    y = xf / scale
    spec = FORMATS[fmt]
    q = torch.clamp(torch.round(y), -INT8_MAX, INT8_MAX) if spec is None else round_fp8(y, *spec)
    return (q * (scale * scale_factor)).to(x.dtype)


class QuantizedCache(KVCache):
    """Rounds every record it is given before appending it (the step's own tokens too).
    `wrong_scale` = (layer, from_step, factor): from that update() call of that layer on
    (step 0 = the prefill), rows are dequantised with factor x their scale (-1 = every
    layer). `static`: one key and one value scale per layer, calibrated on the prefill (its
    absmax x 1.5 / max_code, as offline calibration with headroom), then fixed."""

    def __init__(self, num_layers: int, fmt: str, wrong_scale: Optional[Tuple[int, int, float]] = None,
                 static: bool = False):
        super().__init__(num_layers)
        if fmt not in FORMATS:
            raise ValueError(f"unknown cache format {fmt!r} (known: {', '.join(FORMATS)})")
        self.fmt = fmt
        self.wrong_scale = wrong_scale
        self.calls = [0] * num_layers
        self.static = static
        self.k_scales: List[float] = [0.0] * num_layers
        self.v_scales: List[float] = [0.0] * num_layers

    def update(self, layer_idx, k_new, v_new):
        step = self.calls[layer_idx]
        self.calls[layer_idx] += 1
        factor = 1.0
        if self.wrong_scale is not None:
            layer, from_step, f = self.wrong_scale
            if layer in (-1, layer_idx) and step >= from_step:
                factor = f
        ks = vs = None
        if self.static:
            if step == 0:
                for scales, x in ((self.k_scales, k_new), (self.v_scales, v_new)):
                    scales[layer_idx] = float(x.float().abs().max()) * 1.5 / max_code(self.fmt) or 1.0
            ks, vs = self.k_scales[layer_idx], self.v_scales[layer_idx]
        return super().update(layer_idx, fake_quantize(k_new, self.fmt, factor, ks),
                              fake_quantize(v_new, self.fmt, factor, vs))

    def header(self) -> Dict[str, object]:
        """The trace's kv_cache object (docs/trace-format.md)."""
        if self.static:
            return {"dtype": self.fmt, "scale": "per_layer", "k_scales": list(self.k_scales),
                    "v_scales": list(self.v_scales)}
        return {"dtype": self.fmt, "scale": "per_token_head"}
