"""kvscope_trace.llama_state on states llama.cpp itself saved (tests/fixtures/llama_state,
make_llama_state_fixtures.py): one attention cache, and Gemma 3's iswa memory of two (the
full-attention layer's cache, then the sliding layers'), merged back into model order by the
model's SWA layers; numpy only (the recorder's llama.cpp is not needed to read a state)."""

from __future__ import annotations

import os
import unittest

import numpy as np

from kvscope_trace import llama_state

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("KVSCOPE_REPO") or os.path.join(HERE, "..", "..")
STATES = os.path.join(REPO, "tests", "fixtures", "llama_state")
GEMMA_SWA = [True] * 5 + [False]  # llama.cpp's Gemma 3 period 6 over 6 layers


def read(name: str) -> bytes:
    with open(os.path.join(STATES, name), "rb") as f:
        return f.read()


class LlamaStateTest(unittest.TestCase):
    def test_swa_layers_follow_llama_cpp(self):
        self.assertEqual(llama_state.swa_layers(6, 6), GEMMA_SWA)
        self.assertEqual(llama_state.swa_layers(2, 3), [True, False, True])  # Gemma 2
        self.assertEqual(llama_state.swa_layers([False, True], 2), [False, True])
        with self.assertRaises(llama_state.StateError):
            llama_state.swa_layers([True], 2)

    def test_one_cache(self):
        s = llama_state.parse(read("hd32-f16.ggsq"))
        self.assertIsNone(s.swa)
        self.assertEqual((len(s.positions), len(s.keys)), (13, 2))
        self.assertIs(llama_state.in_model_order(s), s)

    def test_iswa_state_is_merged_in_model_order(self):
        s = llama_state.parse(read("gemma3-swa-f16.ggsq"))
        self.assertIsNotNone(s.swa)
        self.assertEqual((len(s.keys), len(s.swa.keys)), (1, 5))
        merged = llama_state.in_model_order(s, GEMMA_SWA)
        self.assertEqual(len(merged.keys), 6)
        self.assertIs(merged.keys[5], s.keys[0])  # the global layer is the sixth
        order = [s.swa.positions.index(p) for p in s.positions]
        np.testing.assert_array_equal(merged.keys[0], s.swa.keys[0][order])
        layers, positions = llama_state.as_cache(s, 2, 16, False, GEMMA_SWA)
        self.assertEqual(positions, list(range(7)))
        self.assertEqual(layers[0][0].shape, (1, 2, 7, 16))
        with self.assertRaises(llama_state.StateError):  # the layers cannot be placed without the flags
            llama_state.in_model_order(s)

    def test_iswa_state_past_the_window_is_refused(self):
        s = llama_state.parse(read("gemma3-swa-long.ggsq"))
        self.assertEqual((len(s.positions), len(s.swa.positions)), (14, 8))
        with self.assertRaises(llama_state.StateError) as e:
            llama_state.in_model_order(s, GEMMA_SWA)
        self.assertEqual(e.exception.field, "swa cell_count")

    def test_held_layers_give_each_layer_the_rows_it_holds(self):
        s = llama_state.parse(read("gemma3-swa-long.ggsq"))
        layers = llama_state.held_layers(s, 2, 16, False, GEMMA_SWA)
        self.assertEqual([len(p) for _, _, p in layers], [8] * 5 + [14])
        self.assertEqual(layers[0][2], list(range(6, 14)))
        self.assertEqual(layers[5][0].shape, (1, 2, 14, 16))
        np.testing.assert_array_equal(layers[5][0][0, 0, 3], s.keys[0][s.positions.index(3), :16])

    def test_truncated_iswa_state_names_the_second_cache(self):
        with self.assertRaises(llama_state.StateError) as e:
            llama_state.parse(read("gemma3-swa-f16.ggsq")[:-5])
        self.assertTrue(e.exception.field.startswith("swa "), e.exception.field)


if __name__ == "__main__":
    unittest.main()
