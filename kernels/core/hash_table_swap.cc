// HashTable::SwapRows: a staged table's rows swapped in whole (the commit of a checkpoint load).
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/hash_table.h"

namespace sok_lite {
namespace {

std::string TierFileIn(const std::string& dir) { return dir + "/rows.bin"; }

// `problem`, and what went wrong in putting the files back after it, if anything did (then a
// file is left under another name: the message says which).
[[nodiscard]] std::string AfterUndo(const std::string& problem,
                                    const std::vector<std::string>& undo) {
  std::string out = problem;
  for (const std::string& u : undo) {
    if (!u.empty()) out += "; putting the file back failed too: " + u;
  }
  return out;
}

}  // namespace

std::string HashTable::SwapRows(HashTable* staged) {
  const TableConfig& other = staged->config_;
  if (other.dim != config_.dim || other.half_values != config_.half_values ||
      other.half_format != config_.half_format || staged->tiered() != tiered()) {
    return Named("a staged table of another dimension, row format or tiering cannot be swapped in");
  }
  if (tiered()) {
    // Each file moves to the directory of the table that will hold it, through a third name so
    // that no step overwrites a file: ours -> theirs.swap, theirs -> ours, theirs.swap -> theirs.
    const std::string ours = TierFileIn(config_.tier_dir);
    const std::string theirs = TierFileIn(other.tier_dir);
    const std::string parked = theirs + ".swap";
    std::string problem = tier_->MoveTo(parked);
    if (!problem.empty()) return problem;
    problem = staged->tier_->MoveTo(ours);
    if (!problem.empty()) {
      // Back where it was: nothing exchanged.
      return AfterUndo(problem, {tier_->MoveTo(ours)});
    }
    problem = tier_->MoveTo(theirs);
    if (!problem.empty()) {
      std::vector<std::string> undo;  // in order: the staged file leaves `ours` first
      undo.push_back(staged->tier_->MoveTo(theirs));
      undo.push_back(tier_->MoveTo(ours));
      return AfterUndo(problem, undo);
    }
  }
  // The slot layout moves with the rows; where both have as many slots, the live table keeps
  // the initial values it has (a staged table given no fills starts them at zero).
  if (slot_init_.size() != staged->slot_init_.size()) std::swap(slot_init_, staged->slot_init_);
  std::swap(index_, staged->index_);
  std::swap(chunks_, staged->chunks_);
  std::swap(meta_, staged->meta_);
  std::swap(row_used_, staged->row_used_);
  std::swap(free_rows_, staged->free_rows_);
  for (HashTable* table : {this, staged}) {  // marks of rows that moved away
    for (std::vector<bool>& pins : table->pins_) pins.clear();
  }
  std::swap(pending_, staged->pending_);
  std::swap(step_, staged->step_);
  std::swap(tier_, staged->tier_);
  // The rows the staged table moved to disk (a load larger than the budget) count as this
  // table's spills; the staged table's count is negated so that swapping back restores both.
  counters_.spills += staged->counters_.spills;
  staged->counters_.spills = -staged->counters_.spills;
  return "";
}

}  // namespace sok_lite
