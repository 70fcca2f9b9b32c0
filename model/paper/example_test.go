package paper_test

import (
	"fmt"

	"github.com/nhdkit/nhd/model"
	"github.com/nhdkit/nhd/model/paper"
)

// Table 4's model column from the table's own front- and back-end columns.
func Example() {
	mb := func(f paper.Figure) model.Rate { return model.Rate(f.Value) * model.MiBPerSecond }
	before := model.Series(mb(paper.FrontBefore), mb(paper.BackBefore)).MiBps()
	after := model.Series(mb(paper.FrontAfter), mb(paper.BackAfter)).MiBps()
	fmt.Printf("before %.4f (paper %v, matches %v)\n", before, paper.ModelBefore, paper.ModelBefore.Matches(before))
	fmt.Printf("after  %.4f (paper %v, matches %v)\n", after, paper.ModelAfter, paper.ModelAfter.Matches(after))
	// Output:
	// before 1.1466 (paper 1.146 MB/s, matches true)
	// after  3.7162 (paper 3.714 MB/s, matches false)
}
