// The shape shared by the hand-made Zero Bubble schedules ZB-H1 and ZB-H2 (Qi et al., ICLR 2024,
// arXiv 2401.10241): device i runs `warmup(i)` forwards, then one p1 per micro-batch with the
// next forward either before it (ZB-H1) or after it (ZB-H2), and the p2 of micro-batch k - lag(i)
// right after the p1 of micro-batch k; the p2s still owed run at the end. A device therefore
// keeps at most warmup(i) + 1 + lag(i) micro-batches between their F and their p2.
#pragma once

#include <functional>
#include <string_view>

#include "schedules/family.h"

namespace pipeplan {

struct HandcraftedShape {
  std::function<int(int device)> warmup;  // forwards before the first p1 (capped at m)
  std::function<int(int device)> lag;     // p1s before the first p2
  bool forward_first = true;              // steady step F P1 P2 (true) or P1 P2 F (false)
};

Schedule make_handcrafted_zero_bubble(const ScheduleRequest& request, std::string_view family,
                                      const HandcraftedShape& shape);

}  // namespace pipeplan
